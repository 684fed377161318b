# Legation. `make test` is the one command CI runs (see .ci/run).

GO           ?= go
# RACE is passed to `go test` in `test`; `make test RACE=` runs without the
# race detector (it needs cgo and a C compiler).
RACE         ?= -race
# How long `fuzz` runs each fuzz target.
FUZZTIME     ?= 10s
# Every fuzz target, as fuzz/DIR/FuzzName: each func FuzzXxx of a _test.go
# file, found anew at each run. `fuzz` runs them one after the other (or
# side by side under make -j).
FUZZ_FUNC := ^func Fuzz([^a-z(][^(]*)?\(
FUZZ_RUN  := s|^\./(.*/)?[^/]*:func (Fuzz[^(]*)\(.*|fuzz/\1\2|p
FUZZ_RUNS := $(shell grep -rE --include='*_test.go' '$(FUZZ_FUNC)' . | sed -nE '$(FUZZ_RUN)' | sort -u)
# golangci-lint, pinned in hack/tools/go.mod apart from the product's go.mod;
# .golangci.yml says which linters run.
GOLANGCI_LINT := $(GO) tool -modfile=hack/tools/go.mod golangci-lint
# helm, pinned in the same tools module: renders deploy/helm/legation.
HELM := $(GO) tool -modfile=hack/tools/go.mod helm

# Debian packages `setup` installs when what they provide is missing.
APT_PROTOC     := protobuf-compiler
APT_HAPROXY    := haproxy
APT_CC         := gcc libc6-dev
APT_SHELLCHECK := shellcheck
APT_IPROUTE    := iproute2
APT_PODMAN     := podman
APT_CACERTS    := ca-certificates
APT_OPENSSL    := openssl
APT_CURL       := curl
APT_GRPC_PY    := python3-grpcio

.PHONY: all build run demo test check-proto fmt-check golangci-lint shellcheck unit \
	fuzz $(FUZZ_RUNS) e2e bench bench-load bench-capacity chaos lint proto tidy manifests docs setup clean \
	image image-test image-setup release

all: build

build:
	$(GO) build -o bin/ ./cmd/...

# Dev mode: an embedded etcd in ./legation-data, xDS on :18000; /debug/
# answers this machine's loopback clients (the quick start reads it).
run: build
	./bin/xds-node --insecure-loopback-debug

# The demo of docs/getting-started/demo.md: dev mode, two echo backends, examples/ applied
# and a proxyless gRPC client printing the split between the backends each
# second, until Ctrl-C (examples/demo/main.go, internal/tools/demo).
demo: build
	$(GO) build -o bin/legation-demo ./examples/demo
	./bin/legation-demo run

test: setup tidy check-proto fmt-check golangci-lint shellcheck unit fuzz image-test

# What needs setup depends on it, so `make -j test` keeps the order.
check-proto: setup
	./hack/check-proto.sh

fmt-check:
	@out=$$(gofmt -l .); \
	if [ -n "$$out" ]; then \
		echo "these files need gofmt -w:"; echo "$$out"; exit 1; \
	fi

unit: setup
	$(GO) test $(RACE) -count=1 -timeout 20m ./...

fuzz: $(FUZZ_RUNS)
	$(if $(FUZZ_RUNS),,$(error fuzz: no func FuzzXxx found in the _test.go files))
	@echo "fuzz: $(words $(FUZZ_RUNS)) targets passed, $(FUZZTIME) each"

# hack/fuzz.sh runs a target once more when Go's fuzzing coordinator fails
# it on its own deadline race with no input found (see the script).
$(FUZZ_RUNS): fuzz/%: setup
	GO=$(GO) ./hack/fuzz.sh $(patsubst %/,%,$(dir $*)) $(notdir $*) $(FUZZTIME)

e2e: setup
	$(GO) test -count=1 -timeout 90m -tags e2e ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The load scenarios of docs/operations/performance.md (hack/bench-load.sh): Legation
# SotW and delta at BENCH_STREAMS and BENCH_DELTA_STREAMS streams, then
# Legation beside go-control-plane (bench/gcp) at BENCH_GCP_STREAMS (one
# size or several, "2000 10000") and BENCH_SMALL_STREAMS, in each of
# BENCH_GCP_MODES; 0 skips a scenario. The JSON results go to
# BENCH_OUT. BENCH_ETCD=external runs the replica beside an etcd process
# (production's shape: their CPU apart), dev with its embedded etcd.
# 10,000 streams take minutes on 2 cores: make bench-load
# BENCH_STREAMS=2000 BENCH_DELTA_STREAMS=2000 for a quicker look.
BENCH_STREAMS       ?= 10000
BENCH_DELTA_STREAMS ?= 10000
BENCH_GCP_STREAMS   ?= 2000
BENCH_SMALL_STREAMS ?= 500
BENCH_LISTENERS     ?= 4
BENCH_GCP_MODES     ?= sotw delta
# One connection per simulated Envoy and the bootstraps' keepalive pings:
# a real fleet's shape. BENCH_STREAMS_PER_CONN=10 BENCH_KEEPALIVE=0 is
# the shared-connection shape without pings.
BENCH_STREAMS_PER_CONN ?= 1
BENCH_KEEPALIVE        ?= 300s
BENCH_UPDATES       ?= 10
BENCH_INTERVAL      ?= 1s
BENCH_IDLE          ?= 10s
# The idle window of the two 10,000-Envoy scenarios, whose idle CPU is
# held to its target: a round of the clients' pings.
BENCH_TARGETS_IDLE  ?= 320s
BENCH_OUT           ?= bench-load-out
BENCH_ETCD          ?= external
BENCH_LOADGEN_FLAGS ?=
BENCH_NODE_FLAGS    ?=

bench-load:
	GO=$(GO) STREAMS=$(BENCH_STREAMS) DELTA_STREAMS=$(BENCH_DELTA_STREAMS) \
	GCP_STREAMS="$(BENCH_GCP_STREAMS)" GCP_MODES="$(BENCH_GCP_MODES)" SMALL_STREAMS=$(BENCH_SMALL_STREAMS) \
	LISTENERS=$(BENCH_LISTENERS) STREAMS_PER_CONN=$(BENCH_STREAMS_PER_CONN) KEEPALIVE=$(BENCH_KEEPALIVE) UPDATES=$(BENCH_UPDATES) INTERVAL=$(BENCH_INTERVAL) IDLE=$(BENCH_IDLE) TARGETS_IDLE=$(BENCH_TARGETS_IDLE) \
	OUT=$(BENCH_OUT) ETCD=$(BENCH_ETCD) LOADGEN_FLAGS="$(BENCH_LOADGEN_FLAGS)" NODE_FLAGS="$(BENCH_NODE_FLAGS)" ./hack/bench-load.sh

# The capacity check of docs/operations/performance.md (hack/bench-capacity.sh):
# a local cluster of 3 etcd members and CAP_REPLICAS replicas, CAP_STREAMS
# simulated Envoys (one connection each) spread over the replicas, run by
# xds-loadgen in CAP_PROCESSES processes; then CAP_SINGLE_STREAMS on one
# replica (0: not), and the two side by side. 30,000 and 10,000 take about
# 15 minutes.
CAP_STREAMS   ?= 30000
CAP_SINGLE_STREAMS ?= 10000
CAP_PROCESSES ?= 3
CAP_REPLICAS  ?= 3
CAP_MODE      ?= sotw
CAP_UPDATES   ?= 10
CAP_IDLE      ?= 60s
CAP_OUT       ?= bench-capacity-out

bench-capacity:
	GO=$(GO) STREAMS=$(CAP_STREAMS) SINGLE_STREAMS=$(CAP_SINGLE_STREAMS) PROCESSES=$(CAP_PROCESSES) REPLICAS=$(CAP_REPLICAS) MODE=$(CAP_MODE) \
	UPDATES=$(CAP_UPDATES) IDLE=$(CAP_IDLE) OUT=$(CAP_OUT) LOADGEN_FLAGS="$(BENCH_LOADGEN_FLAGS)" NODE_FLAGS="$(BENCH_NODE_FLAGS)" \
	./hack/bench-capacity.sh

# The chaos run of docs/development/chaos.md (cmd/xds-chaos): per seed, 3 etcd
# members, 3 replicas, 300 recording clients, applies at a steady rate,
# random faults for DURATION, heal, and the history check; one line per
# seed. CHAOS_PARALLEL seeds at once; CHAOS_FLAGS for more (--first-seed,
# --seed-list, --clients, -v). make test runs one short seed
# (internal/tools/chaos/runner's TestShortSeed).
SEEDS          ?= 1
DURATION       ?= 5m
CHAOS_PARALLEL ?= 1
CHAOS_FLAGS    ?=

chaos: setup
	$(GO) build -o bin/xds-chaos ./cmd/xds-chaos
	./bin/xds-chaos --seeds $(SEEDS) --duration $(DURATION) --parallel $(CHAOS_PARALLEL) $(CHAOS_FLAGS)

lint: fmt-check golangci-lint shellcheck

# go vet's analyzers, staticcheck, errcheck, ineffassign, unused, and
# nolintlint: every //nolint names a linter that runs, says why, and is
# still needed.
golangci-lint:
	$(GOLANGCI_LINT) run ./...

# Every tracked shell script (*.sh, or a sh/bash #! line).
shellcheck: setup
	./hack/shellcheck.sh

# The container image (deploy/image/Containerfile, built by hack/image.sh
# with podman): static xds-node and xdsadmin and the CA bundle, FROM
# scratch, as IMAGE_REPOSITORY:VERSION, the image a default install of the
# chart pulls: IMAGE_REPOSITORY defaults to the chart's image.repository
# (ghcr.io/legation-io/legation; `make image IMAGE_REPOSITORY=
# registry.example.com/legation` for your registry), VERSION is
# CHANGELOG.md's latest release (hack/version.sh).
image: image-setup
	GO=$(GO) ./hack/image.sh

# A release of HEAD (hack/release.sh): refuses when CHANGELOG.md, the
# chart's version and appVersion and the git tags disagree, or the tree
# has changes; then builds the image as `image` does and packages the
# chart into dist/ (helm package, the pinned helm). It prints the tag and
# push commands; it runs none.
release: image-setup
	GO=$(GO) HELM="$(HELM)" ./hack/release.sh

# Builds the image in a throw-away podman storage and checks it: user,
# entrypoint, ports, labels, its files, and its binaries run (needs root).
image-test: image-setup
	GO=$(GO) ./hack/image-test.sh

# What `image` needs from Debian (`setup` runs it first): podman and the
# CA bundle copied into the image.
image-setup:
	@set -e; need=""; \
	command -v podman >/dev/null 2>&1 || need="$$need $(APT_PODMAN)"; \
	[ -s /etc/ssl/certs/ca-certificates.crt ] || need="$$need $(APT_CACERTS)"; \
	if [ -z "$$need" ]; then exit 0; fi; \
	sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	echo "image-setup: installing$$need"; \
	$$sudo apt-get update; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$need

# Regenerates proto/ in place; commit the result (check-proto fails otherwise).
proto:
	./proto/gen.sh

# Rewrites the generated parts of the docs (flag tables, the etcd key
# layout, the metrics catalogue, the bootstraps included from deploy/envoy)
# from the code: each is a region between <!-- NAME:begin --> and
# <!-- NAME:end --> that a TestDocs* test renders and `make test` checks
# (internal/testkit/docgen). Commit the result.
docs:
	UPDATE_DOCS=1 $(GO) test -count=1 -run '^TestDocs' ./...

# Renders the Helm chart's default values, with deploy/kubernetes/values.yaml
# over them (the generated Secrets named, not rendered), into
# deploy/kubernetes/ (commit the result: cmd/xds-node's TestChartDefault
# fails when it is stale; it renders with the same release name, namespace
# and values file).
manifests:
	@mkdir -p deploy/kubernetes
	$(HELM) template legation deploy/helm/legation --namespace legation -f deploy/kubernetes/values.yaml > deploy/kubernetes/legation.yaml.tmp
	mv deploy/kubernetes/legation.yaml.tmp deploy/kubernetes/legation.yaml

# Fails, showing the diff, when go.mod or go.sum are not tidy, the
# product's or the tools module's (hack/tools).
tidy:
	$(GO) mod tidy -diff
	$(GO) -C hack/tools mod tidy -diff

# Installs what the tests need from Debian when it is missing: protoc (and
# the well-known .proto files), haproxy, shellcheck, ip (the network
# namespaces of internal/testkit/netnstest), openssl (docs/operations/security.md's
# certificate recipe), curl (the quick start's commands, which
# docs/commands_test.go runs), gRPC C-core's Python binding (the xDS
# client of e2e's federation test, run with Debian's /usr/bin/python3), a
# C compiler for -race, and (through image-setup) podman and the CA
# bundle for image-test.
setup: image-setup
	@set -e; need=""; \
	command -v protoc >/dev/null 2>&1 || need="$$need $(APT_PROTOC)"; \
	[ -f /usr/include/google/protobuf/any.proto ] || need="$$need libprotobuf-dev"; \
	command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need="$$need $(APT_HAPROXY)"; \
	command -v shellcheck >/dev/null 2>&1 || need="$$need $(APT_SHELLCHECK)"; \
	command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need="$$need $(APT_IPROUTE)"; \
	command -v openssl >/dev/null 2>&1 || need="$$need $(APT_OPENSSL)"; \
	command -v curl >/dev/null 2>&1 || need="$$need $(APT_CURL)"; \
	/usr/bin/python3 -c 'import grpc' >/dev/null 2>&1 || need="$$need $(APT_GRPC_PY)"; \
	if [ -n "$(RACE)" ] && ! command -v gcc >/dev/null 2>&1; then need="$$need $(APT_CC)"; fi; \
	if [ -z "$$need" ]; then echo "setup: nothing to install"; exit 0; fi; \
	sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	echo "setup: installing$$need"; \
	$$sudo apt-get update; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$need

clean:
	rm -rf bin dist
