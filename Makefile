.PHONY: run test install lint bench

run:
	scripts/run

test:
	scripts/test

install:
	scripts/install --node

lint:
	scripts/lint

bench:
	scripts/install
	.venv/bin/python bench/run.py
