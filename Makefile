# dygrad's entry points. `make test` installs what is missing (apt and pip), builds and runs every test.
PYTHON ?= python3
BUILD ?= build
JOBS ?= $(shell nproc)
APT_PACKAGES = cmake ninja-build g++ libopenblas-serial-dev libopenblas-pthread-dev libgtest-dev libgmock-dev \
               libbenchmark-dev valgrind
PIP_PACKAGES = numpy pytest

.PHONY: all deps build test test-cpp sanitize bench clean

all: build

# Installs system and Python packages only when something is missing (no network use otherwise).
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@$(PYTHON) -c "import numpy, pytest" 2>/dev/null || $(PYTHON) -m pip install -q $(PIP_PACKAGES)

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test-cpp: build
	cd $(BUILD) && ctest --output-on-failure -j 1

test: test-cpp

clean:
	rm -rf $(BUILD) build-asan build-tsan
