# Hatchery's build. `make test` is what CI runs (through .ci/run); `make bench`
# gathers the figures, which CI does not run.
GO ?= go
BIN := bin/hatch
# Packages with tests that need a real Docker Engine (files tagged `docker`).
DOCKER_PKGS = $(shell grep -rl --include='*_test.go' '^//go:build docker' . | xargs -r -n1 dirname | sort -u)

.PHONY: build test test-unit test-docker test-long fuzz fuzz-ci bench lint clean demo demo-apps

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

# Pure and local tests, with the race detector (which needs cgo), then
# each fuzz target for a short while.
test-unit:
	@start=$$(date +%s); \
	$(GO) test -race -count=1 ./... ; rc=$$?; \
	echo "test-unit: $$(( $$(date +%s) - start ))s"; \
	$(MAKE) --no-print-directory fuzz-ci || rc=1; exit $$rc

# The fuzz targets, as package:target: the loaders of hatch.yaml and
# Compose, hatch.yaml written back by spec.Marshal, and the API by route
# family (bodies through a real server on a temporary SQLite store, each
# input checked to leave the fixture's tokens and host working). Their seeds
# are in each package's testdata/fuzz; a failing input a run finds is written
# there too, to be fixed and kept as a seed (the new inputs that only widen
# coverage stay in Go's fuzz cache, which later runs start from).
FUZZ_TARGETS = ./internal/spec:FuzzParse ./internal/spec:FuzzMarshalRoundTrip ./internal/compose:FuzzLoad \
	./internal/server:FuzzProjectsAPI ./internal/server:FuzzHostsAPI ./internal/server:FuzzTokensAPI \
	./internal/server:FuzzBlobsAPI ./internal/server:FuzzReadsAPI ./internal/server:FuzzReportAPI \
	./internal/server:FuzzRunsAPI
FUZZTIME ?= 10m

# go test -fuzz takes one target per invocation: run each in turn. Go
# 1.26's fuzzing coordinator can fail a target with a bare "context deadline
# exceeded" as -fuzztime ends (go.dev/issue/75804, fixed in Go 1.27), with
# no input to blame: a target that fails without writing a failing input
# under testdata/fuzz runs once more, and fails the run if it fails again.
# A failing input found is never retried away.
#
# Each new input that widens coverage is minimised first, for 60 s by
# default: in a 10 s run, FuzzLoad stalled at 0 executions a second on its
# first one and found nothing. -fuzzminimizetime 1s keeps it exploring.
define run-fuzz
	@start=$$(date +%s); rc=0; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		for try in 1 2; do \
			before=$$(ls "$$pkg/testdata/fuzz/$$name" 2>/dev/null | wc -l); \
			$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(1) -fuzzminimizetime 1s "$$pkg" && break; \
			after=$$(ls "$$pkg/testdata/fuzz/$$name" 2>/dev/null | wc -l); \
			if [ "$$after" != "$$before" ] || [ $$try = 2 ]; then rc=1; break; fi; \
			echo "fuzz: $$name failed without a failing input (go.dev/issue/75804): once more"; \
		done; \
	done; \
	echo "fuzz ($(1) per target): $$(( $$(date +%s) - start ))s"; exit $$rc
endef

# CI's share: 10 s per target (9 targets, about 2 minutes in all).
fuzz-ci:
	$(call run-fuzz,10s)

# A long run outside CI: FUZZTIME per target (default 10m).
fuzz:
	$(call run-fuzz,$(FUZZTIME))

# Tests against the real Docker Engine: one package at a time, no race
# detector. gotestsum prints each test with its duration (each issue's CI
# share is a sum of these) and repeats the failures' output at the end.
GOTESTSUM ?= $(GO) run gotest.tools/gotestsum@v1.13.0
test-docker:
	@start=$$(date +%s); rc=0; \
	if [ -n "$(DOCKER_PKGS)" ]; then $(GOTESTSUM) --format testname -- -tags docker -p 1 -count=1 -timeout 25m $(DOCKER_PKGS) || rc=$$?; \
	else echo "test-docker: no docker-tagged packages yet"; fi; \
	echo "test-docker: $$(( $$(date +%s) - start ))s"; exit $$rc

# Longer variants of CI's chaos tests (more trials), then the end-to-end
# package once under the race detector (CI runs Docker tests without it, so
# a race in a test's own goroutines would go unreported), not run by CI.
CHAOS_TRIALS ?= 15
test-long: bin/weed
	$(GO) test -race -count=1 ./internal/backup/...
	HATCH_CHAOS_TRIALS=$(CHAOS_TRIALS) $(GO) test -tags docker -p 1 -count=1 -timeout 60m -run 'Chaos' -v ./test/e2e/
	$(GO) test -tags docker -race -p 1 -count=1 -timeout 90m ./test/e2e/

# SeaweedFS, the real S3 server of the backup bucket's tests
# (internal/testutil/s3test), built from its wrapper module, which repeats
# seaweedfs's replace directives: about 9 minutes cold.
bin/weed: tools/seaweedfs/go.mod tools/seaweedfs/go.sum
	cd tools/seaweedfs && $(GO) build -o ../../bin/weed github.com/seaweedfs/seaweedfs/weed

bench:
	# Volume backups: throughput against io.Copy, 200 MB incremental, 1 GB peak heap.
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./internal/backup/
	$(GO) test -run '^$$' -bench . -benchtime 3x ./internal/reconciler/ ./internal/converge/ ./internal/ingress/ ./internal/server/ ./internal/mesh/ ./internal/deploy/ ./internal/sessionbroker/ ./internal/store/postgres/
	# The agent's figures on the real Docker Engine, and many hosts' on the
	# namespace cluster (host loss, mesh against direct, and a volume's
	# failover: loss to serving against after, the data window the event
	# reports against what was lost): one measurement each.
	$(GO) test -tags docker -run '^$$' -bench . -benchtime 1x -timeout 30m ./test/e2e/
	# The agent's volume backups through Docker's archive API: backup and
	# restore of 256 MB against a plain archive read and PUT, the 200 MB
	# incremental ratio, and the resident memory's peak during a 1 GB backup.
	$(GO) test -tags docker -run '^$$' -bench Volume -benchtime 1x -timeout 30m ./internal/agent/
	# The fleet: simulated agents (HATCH_FLEET_AGENTS, default 100,1000,2000) on
	# 2 servers over PostgreSQL and 1 over SQLite, in the same run.
	$(GO) test -run '^$$' -bench Fleet -benchtime 1x -timeout 120m ./internal/cli/
	# Loading 10,000 Compose services against a hatch.yaml of as many eggs:
	# in all, compose-go's part, its floor and this package's own part (last:
	# it fails if its own part is above 3; compose-go's alone is above 2).
	$(GO) test -run '^$$' -bench . -benchtime 1x ./internal/compose/

# The layer check (internal/archtest) runs in test-unit too; lint runs it
# alone, so an import that crosses the layers of docs/ARCHITECTURE.md fails
# here in seconds.
lint:
	$(GO) vet ./...
	$(GO) test -count=1 -run TestImportsFollowTheLayers ./internal/archtest/
	$(GO) vet -tags docker ./...
	staticcheck ./...
	staticcheck -tags docker ./...

clean:
	rm -rf bin
