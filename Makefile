# Hatchery's build. `make test` is what CI runs (through .ci/run); `make bench`
# gathers the figures, which CI does not run.
GO ?= go
BIN := bin/hatch
# Packages with tests that need a real Docker Engine (files tagged `docker`).
DOCKER_PKGS = $(shell grep -rl --include='*_test.go' '^//go:build docker' . | xargs -r -n1 dirname | sort -u)

.PHONY: build test test-unit test-docker bench lint clean demo demo-apps

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/hatch

# The demo (README, command 1): the demo apps' static binaries go into their
# build contexts (each image is FROM scratch plus its binary), then `hatch up`
# runs a control plane and an agent for the local Docker Engine, deploys the
# demo and follows it until Ctrl-C. State is kept in ./.hatch.
DEMO_APPS := examples/demo/web/web examples/demo/kv/kv

demo: build demo-apps
	$(BIN) up -f examples/demo/hatch.yaml --yes

demo-apps:
	@for app in $(DEMO_APPS); do \
		CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -o $$app ./$$(dirname $$app) || exit 1; \
	done

test: test-unit test-docker

# Pure and local tests, with the race detector (which needs cgo).
test-unit:
	@start=$$(date +%s); \
	$(GO) test -race -count=1 ./... ; rc=$$?; \
	echo "test-unit: $$(( $$(date +%s) - start ))s"; exit $$rc

# Tests against the real Docker Engine: one package at a time, no race detector.
test-docker:
	@start=$$(date +%s); rc=0; \
	if [ -n "$(DOCKER_PKGS)" ]; then $(GO) test -tags docker -p 1 -count=1 -timeout 25m $(DOCKER_PKGS) || rc=$$?; \
	else echo "test-docker: no docker-tagged packages yet"; fi; \
	echo "test-docker: $$(( $$(date +%s) - start ))s"; exit $$rc

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./internal/reconciler/ ./internal/converge/ ./internal/ingress/ ./internal/server/ ./internal/mesh/ ./internal/sessions/
	# The agent's figures on the real Docker Engine, and many hosts' on the
	# namespace cluster (host loss, mesh against direct): one measurement each.
	$(GO) test -tags docker -run '^$$' -bench . -benchtime 1x -timeout 30m ./test/e2e/

lint:
	$(GO) vet ./...
	$(GO) vet -tags docker ./...
	staticcheck ./...
	staticcheck -tags docker ./...

clean:
	rm -rf bin
