.PHONY: run test install lint bench

# make run LISTEN=127.0.0.1:9000 serves the demo elsewhere (default 127.0.0.1:8000)
run:
	scripts/run $(if $(LISTEN),--listen $(LISTEN))

test:
	scripts/test

install:
	scripts/install --node --services

lint:
	scripts/lint

bench:
	scripts/bench --duration 4 --warmup 2 --repeat 5
