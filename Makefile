# ingot - convenience wrapper around CMake. See README.md.
#   make deps        install missing Debian packages (apt-get)
#   make build       configure and build build/ingot (-Wall -Wextra -Werror)
#   make test        deps + build + every test (ctest; every fuzz target once over its committed
#                    corpus, tests/fuzz/README.md), then the unit tests (and fuzz targets) under
#                    ASan+UBSan and the threaded ones (core pool, pipeline, loader, shards, the
#                    tokenizer's shared entries) under TSan
#   make quickstart  the main job on the bundled data in data/ (builds only build/ingot, without
#                    the CUDA backend unless CUDA=1)
#   make quickstart-video  the latent video path: clip shards of data/video/ and their captions'
#                    T5 features, a small VAE, latent shards, a video DiT on the latents by label
#                    and one by caption, sampled videos decoded through the VAE
#   make bench       benchmark programs (figures as ratios against references)
#   make bench-startup  commands that do not use the GPU (--help, --version, tokenize of a line):
#                    how long they take in the CUDA build against a build without CUDA (built as
#                    BUILD-nocuda); also part of make bench
#   make bench-cuda  the CUDA backend: GPT-2 small tokens/s and MFU, attention paths, PyTorch's step on the same GPU (needs a GPU;
#                    prints "skipped: no CUDA device" without one)
#   make bench-train the GPT-2 trainer's step and its PyTorch / llm.c peers only (TRAIN_THREADS,
#                    LLMC_DIR: see tools/bench/run.sh)
#   make bench-bf16  GPT-2 small's and DiT-S/2's steps in bf16 (train.dtype: bf16) against fp32 and
#                    PyTorch's CPU autocast bf16: tokens/s, MFU over the bf16 GEMM peak, memory
#                    (TRAIN_THREADS; also part of make bench)
#   make bench-conv  the VAE's CPU kernels (conv2d, GroupNorm + SiLU, upsampling) and PyTorch's
#                    F.conv2d on the same shapes (CONV_THREADS)
#   make bench-t5    the T5 encoder's captions/s against PyTorch's T5 encoder (same weights,
#                    captions and threads; T5_THREADS, T5_SHAPE: see tools/bench/run.sh)
#   make bench-vae   the VAE's encoder at SD's shape on 256x256 frames against PyTorch's
#                    AutoencoderKL on the same weights and frames: frames/s, peak RSS; a training
#                    step on 128x128 frames against torch's (VAE_THREADS)
#   make bench-tokenizer  preprocess text end to end (1 and 2 workers; GPT-2, cl100k on a 51 MB mix,
#                    o200k on the UDHR) against tiktoken's encode on the same documents, then the
#                    tokenizer alone (TOK_RUNS: runs per figure, default 3)
#   make bench-video `preprocess video` writing 300-frame clips of 10 s 720p files against the
#                    ffmpeg CLI writing the same bytes (one video; four with --workers 2); builds
#                    only the ingot program
#   make fuzz        libFuzzer targets (clang), each for FUZZ_SECONDS
#   make clean       remove build directories
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 60
CMAKE_FLAGS ?=
# CUDA=1: the CUDA backend in every build (when nvcc is found); CUDA=0: in none; unset: in
# `make build` and `make test` (when nvcc is found), not in `make quickstart`
CUDA       ?=
CUDA_BUILD  = $(if $(filter 0 OFF off no,$(CUDA)),OFF,ON)
CUDA_QUICK  = $(if $(filter 1 ON on yes,$(CUDA)),ON,OFF)
IG_CUDA_NOW = $(CUDA_BUILD)

.PHONY: all deps build test test-asan test-tsan quickstart quickstart-video bench bench-startup bench-cuda bench-train bench-bf16 bench-conv bench-t5 bench-vae bench-tokenizer bench-video fuzz clean format

all: build

deps:
	@bash tools/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIG_CUDA=$(IG_CUDA_NOW) $(CMAKE_FLAGS)

# (IG_CUDA is set on every call: a quickstart's build without CUDA does not stick to make build)
build: deps $(BUILD)/CMakeCache.txt
	cmake -S . -B $(BUILD) -DIG_CUDA=$(IG_CUDA_NOW) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@bash tools/report-skips.sh $(BUILD)
	$(MAKE) --no-print-directory test-tsan
	$(MAKE) --no-print-directory test-asan

test-asan:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DIG_SANITIZE=ON -DIG_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L unit

TSAN_TESTS = test_core test_pipeline test_loader test_shard test_kernels test_train test_video_pipeline \
             test_tokenizer_threads
test-tsan:
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIG_TSAN=ON -DIG_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TESTS)
	cd $(TSAN_BUILD) && TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" ctest --output-on-failure -j $(JOBS) -R '^($(subst $(eval) ,|,$(TSAN_TESTS)))$$'

# only what it runs: the ingot program (not the tests, benchmarks or the CUDA backend)
quickstart quickstart-video: IG_CUDA_NOW = $(CUDA_QUICK)
quickstart: deps $(BUILD)/CMakeCache.txt
	cmake -S . -B $(BUILD) -DIG_CUDA=$(IG_CUDA_NOW) >/dev/null
	cmake --build $(BUILD) -j $(JOBS) --target ingot
	@bash tools/quickstart.sh $(BUILD)

quickstart-video: deps $(BUILD)/CMakeCache.txt
	cmake -S . -B $(BUILD) -DIG_CUDA=$(IG_CUDA_NOW) >/dev/null
	cmake --build $(BUILD) -j $(JOBS) --target ingot
	@bash tools/quickstart_video.sh $(BUILD)

bench: build
	@bash tools/bench/run.sh $(BUILD)

bench-startup: build
	@bash tools/bench/run.sh $(BUILD) startup

bench-cuda: build
	@bash tools/bench/run.sh $(BUILD) cuda
bench-train: build
	@bash tools/bench/run.sh $(BUILD) train
bench-bf16: build
	@bash tools/bench/run.sh $(BUILD) bf16
bench-conv: build
	@bash tools/bench/run.sh $(BUILD) conv
bench-vae: build
	@bash tools/bench/run.sh $(BUILD) vae

bench-t5: build
	@bash tools/bench/run.sh $(BUILD) t5

bench-tokenizer: build
	@bash tools/bench/run.sh $(BUILD) tokenizer

bench-video: IG_CUDA_NOW = $(CUDA_QUICK)
bench-video: deps $(BUILD)/CMakeCache.txt
	cmake -S . -B $(BUILD) -DIG_CUDA=$(IG_CUDA_NOW) >/dev/null
	cmake --build $(BUILD) -j $(JOBS) --target ingot
	@bash tools/bench/run.sh $(BUILD) video

fuzz: deps
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIG_FUZZ=ON -DIG_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_all
	@bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
