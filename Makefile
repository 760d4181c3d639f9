.PHONY: run test install lint bench

run:
	scripts/run

test:
	scripts/test

install:
	scripts/install --node --services

lint:
	scripts/lint

bench:
	scripts/bench --duration 4 --warmup 2 --repeat 5
