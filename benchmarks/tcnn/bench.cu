// tcnn_bench: times full training steps (forward + L2 loss + backward + Adam)
// of tiny-cuda-nn models through its C++ API (tcnn::create_from_config).
// Derived from ../shared/tools/tcnn-bench/bench.cu (2D only); this copy adds --dims (2D and 3D
// inputs), per-batch --steps and --rtc-cache, and prints dims=D in each RESULT line.
//
// Models (all D = 2 or 3 inputs -> 3 outputs, FullyFusedMLP 64 neurons x 2 hidden layers,
// ReLU, no output activation, L2 loss, Adam; fp16 parameters, as tcnn ships):
//   hashgrid  : HashGrid (16 levels x 2 features, log2 hashmap 19, base res 16,
//               per-level scale 1.5) -> FullyFusedMLP
//   frequency : Frequency (12 frequencies, D -> 24 D dims)     -> FullyFusedMLP
//   identity  : Identity (D)                                   -> FullyFusedMLP
// Inputs and targets are uniform random in [0, 1] (timing only: nothing is learnt).
//
// Usage: tcnn_bench [--steps N or N1,N2,..] [--warmup N] [--batches 16384,262144] [--dims 2,3]
//                   [--models hashgrid,frequency,identity] [--jit 0|1|both]
//                   [--per-level-scale 1.5] [--n-cycle 8] [--rtc-cache DIR] [--json out.json]
//   --steps: timed steps, one value for every batch or one per batch of --batches.
//   --rtc-cache: where JIT fusion keeps its compiled kernels (reused across runs and batches).
//   --split N: after each classic (jit=0) run, time N more steps phase by phase (events between
//              Trainer::forward (encoding, MLP, loss), Trainer::backward and Trainer::optimizer_step)
//              and print one SPLIT line with the median of each phase, e.g.
//              SPLIT model=hashgrid dims=3 batch=262144 steps=200 forward_ms=0.31 backward_ms=0.52 optimizer_ms=0.15
//
// Each timed configuration prints one line starting with "RESULT", e.g.
// RESULT model=hashgrid dims=2 batch=16384 jit=0 steps=1000 mean_ms=0.2345 chunk_median_ms=0.2301 chunk_min_ms=0.2250 chunk_max_ms=0.3012 wall_mean_ms=0.2346 msamples_per_s=69.87 loss_first=0.33 loss_last=0.08 n_params=...
// (jit=0(jit_failed) when JIT fusion was asked for but tcnn fell back to its classic kernels.)

#include <tiny-cuda-nn/common_host.h>
#include <tiny-cuda-nn/config.h>
#include <tiny-cuda-nn/gpu_matrix.h>
#include <tiny-cuda-nn/random.h>
#include <tiny-cuda-nn/rtc_kernel.h>
#include <tiny-cuda-nn/trainer.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace tcnn;

namespace {

#define BENCH_CUDA_CHECK(x)                                                                          \
	do {                                                                                             \
		cudaError_t _e = (x);                                                                        \
		if (_e != cudaSuccess) {                                                                     \
			std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(_e)); \
			std::exit(2);                                                                            \
		}                                                                                            \
	} while (0)

std::vector<std::string> split_list(const std::string& s) {
	std::vector<std::string> out;
	std::stringstream ss{s};
	std::string item;
	while (std::getline(ss, item, ',')) {
		if (!item.empty()) out.push_back(item);
	}
	return out;
}

struct Options {
	std::vector<uint32_t> steps = {1000}; // one for all batches, or one per batch
	uint32_t warmup = 100;
	std::vector<uint32_t> batches = {1u << 14, 1u << 18};
	std::vector<uint32_t> dims = {2};
	std::vector<std::string> models = {"hashgrid", "frequency", "identity"};
	std::string jit = "both"; // "0", "1", or "both"
	float per_level_scale = 1.5f;
	uint32_t n_cycle = 8; // number of distinct pre-generated random batches cycled through
	std::string json_path;
	std::string rtc_cache;
	uint32_t split = 0; // steps timed phase by phase after each classic run (0: none)

	uint32_t steps_for(size_t batch_index) const { return steps.size() == 1 ? steps[0] : steps.at(batch_index); }
};

std::vector<uint32_t> parse_uint_list(const std::string& s, const char* what) {
	std::vector<uint32_t> out;
	for (auto& item : split_list(s)) {
		const unsigned long v = std::stoul(item);
		if (v == 0) {
			std::fprintf(stderr, "%s: values must be >= 1, got %s\n", what, s.c_str());
			std::exit(1);
		}
		out.push_back((uint32_t)v);
	}
	if (out.empty()) {
		std::fprintf(stderr, "%s: empty list\n", what);
		std::exit(1);
	}
	return out;
}

Options parse(int argc, char** argv) {
	Options o;
	for (int i = 1; i < argc; ++i) {
		std::string a = argv[i];
		auto next = [&]() -> std::string {
			if (i + 1 >= argc) {
				std::fprintf(stderr, "missing value for %s\n", a.c_str());
				std::exit(1);
			}
			return argv[++i];
		};
		if (a == "--steps") o.steps = parse_uint_list(next(), "--steps");
		else if (a == "--warmup") o.warmup = std::max(1u, (uint32_t)std::stoul(next()));
		else if (a == "--batches") o.batches = parse_uint_list(next(), "--batches");
		else if (a == "--dims") o.dims = parse_uint_list(next(), "--dims");
		else if (a == "--rtc-cache") o.rtc_cache = next();
		else if (a == "--models") o.models = split_list(next());
		else if (a == "--jit") o.jit = next();
		else if (a == "--per-level-scale") o.per_level_scale = std::stof(next());
		else if (a == "--n-cycle") o.n_cycle = std::max(1u, (uint32_t)std::stoul(next()));
		else if (a == "--json") o.json_path = next();
		else if (a == "--split") o.split = (uint32_t)std::stoul(next());
		else if (a == "-h" || a == "--help") {
			std::printf("usage: %s [--steps N|N1,N2,..] [--warmup N] [--batches a,b] [--dims 2,3] [--models hashgrid,frequency,identity] [--jit 0|1|both] [--per-level-scale S] [--n-cycle K] [--rtc-cache DIR] [--split N] [--json FILE]\n", argv[0]);
			std::exit(0);
		} else {
			std::fprintf(stderr, "unknown argument %s\n", a.c_str());
			std::exit(1);
		}
	}
	if (o.steps.size() != 1 && o.steps.size() != o.batches.size()) {
		std::fprintf(stderr, "--steps: give one value or one per batch (%zu batches), got %zu values\n", o.batches.size(), o.steps.size());
		std::exit(1);
	}
	for (uint32_t d : o.dims) {
		if (d != 2 && d != 3) {
			std::fprintf(stderr, "--dims: each value must be 2 or 3 (the kit compiles 2D and 3D hash grids), got %u\n", d);
			std::exit(1);
		}
	}
	return o;
}

json make_config(const std::string& model, float per_level_scale) {
	json encoding;
	if (model == "hashgrid") {
		encoding = {
			{"otype", "HashGrid"},
			{"n_levels", 16},
			{"n_features_per_level", 2},
			{"log2_hashmap_size", 19},
			{"base_resolution", 16},
			{"per_level_scale", per_level_scale},
		};
	} else if (model == "frequency") {
		encoding = {
			{"otype", "Frequency"},
			{"n_frequencies", 12},
		};
	} else if (model == "identity") {
		encoding = {
			{"otype", "Identity"},
		};
	} else {
		throw std::runtime_error{"unknown model '" + model + "' (use hashgrid, frequency or identity)"};
	}

	return {
		{"loss", {{"otype", "L2"}}},
		{"optimizer", {
			{"otype", "Adam"},
			{"learning_rate", 1e-2},
			{"beta1", 0.9},
			{"beta2", 0.99},
			{"epsilon", 1e-15},
			{"l2_reg", 1e-6},
		}},
		{"encoding", encoding},
		{"network", {
			{"otype", "FullyFusedMLP"},
			{"activation", "ReLU"},
			{"output_activation", "None"},
			{"n_neurons", 64},
			{"n_hidden_layers", 2},
		}},
	};
}

struct Result {
	std::string model;
	uint32_t dims;
	uint32_t batch;
	bool jit_requested;
	bool jit_active;
	uint32_t steps;
	double mean_ms, median_chunk_ms, min_chunk_ms, max_chunk_ms, wall_mean_ms;
	float loss_first, loss_last;
	size_t n_params;
};

Result run_one(const Options& opt, const std::string& model_name, uint32_t n_in, uint32_t batch, uint32_t steps, bool jit, cudaStream_t stream) {
	const uint32_t n_out = 3;
	json config = make_config(model_name, opt.per_level_scale);

	TrainableModel model = create_from_config(n_in, n_out, config);
	model.network->set_jit_fusion(jit);

	// Pre-generate n_cycle distinct random batches (inputs and targets uniform in [0,1]),
	// so that no RNG work happens inside the timed loop.
	default_rng_t rng{1337};
	std::vector<GPUMatrix<float>> inputs, targets;
	inputs.reserve(opt.n_cycle);
	targets.reserve(opt.n_cycle);
	for (uint32_t k = 0; k < opt.n_cycle; ++k) {
		inputs.emplace_back(n_in, batch);
		targets.emplace_back(n_out, batch);
		generate_random_uniform<float>(stream, rng, (size_t)batch * n_in, inputs.back().data());
		generate_random_uniform<float>(stream, rng, (size_t)batch * n_out, targets.back().data());
	}
	BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));

	// Warm-up (includes JIT compilation, CUDA-graph capture and workspace allocation).
	float loss_first = 0.0f;
	{
		auto ctx = model.trainer->training_step(stream, inputs[0], targets[0]);
		loss_first = model.trainer->loss(stream, *ctx);
	}
	for (uint32_t i = 1; i < opt.warmup; ++i) {
		model.trainer->training_step(stream, inputs[i % opt.n_cycle], targets[i % opt.n_cycle]);
	}
	BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
	const bool jit_active = model.network->jit_fusion();

	// Timed loop. Events only at chunk boundaries (10 chunks), so that event recording adds no
	// per-step overhead; mean = total GPU-timeline time / steps, min/max = fastest/slowest chunk mean.
	const uint32_t n_chunks = std::min<uint32_t>(10, steps);
	std::vector<cudaEvent_t> ev(n_chunks + 1);
	for (auto& e : ev) BENCH_CUDA_CHECK(cudaEventCreate(&e));

	auto t0 = std::chrono::steady_clock::now();
	BENCH_CUDA_CHECK(cudaEventRecord(ev[0], stream));
	uint32_t chunk = 0;
	for (uint32_t i = 0; i < steps; ++i) {
		model.trainer->training_step(stream, inputs[i % opt.n_cycle], targets[i % opt.n_cycle]);
		if ((uint64_t)(i + 1) * n_chunks / steps != (uint64_t)i * n_chunks / steps) {
			BENCH_CUDA_CHECK(cudaEventRecord(ev[++chunk], stream));
		}
	}
	BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
	auto t1 = std::chrono::steady_clock::now();

	std::vector<double> chunk_means;
	for (uint32_t c = 0; c < n_chunks; ++c) {
		float ms = 0.0f;
		BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[c], ev[c + 1]));
		auto ceil_div = [](uint64_t a, uint64_t b) { return (a + b - 1) / b; };
		const uint64_t steps_in_chunk = ceil_div((uint64_t)(c + 1) * steps, n_chunks) - ceil_div((uint64_t)c * steps, n_chunks);
		chunk_means.push_back(ms / std::max<uint64_t>(1, steps_in_chunk));
	}
	float total_ms = 0.0f;
	BENCH_CUDA_CHECK(cudaEventElapsedTime(&total_ms, ev[0], ev[n_chunks]));
	for (auto& e : ev) BENCH_CUDA_CHECK(cudaEventDestroy(e));

	std::vector<double> sorted = chunk_means;
	std::sort(sorted.begin(), sorted.end());

	if (opt.split > 0 && !jit_active) {
		// Phase by phase: four events per step; the median of each phase over opt.split steps.
		// The same loss scale as Trainer::training_step (128 for fp16 parameters).
		const float loss_scale = default_loss_scale<network_precision_t>();
		std::vector<cudaEvent_t> pe((size_t)opt.split * 4);
		for (auto& e : pe) BENCH_CUDA_CHECK(cudaEventCreate(&e));
		for (uint32_t i = 0; i < opt.split; ++i) {
			const auto& in = inputs[i % opt.n_cycle];
			BENCH_CUDA_CHECK(cudaEventRecord(pe[4 * i], stream));
			auto ctx = model.trainer->forward(stream, loss_scale, in, targets[i % opt.n_cycle]);
			BENCH_CUDA_CHECK(cudaEventRecord(pe[4 * i + 1], stream));
			model.trainer->backward(stream, *ctx, in);
			BENCH_CUDA_CHECK(cudaEventRecord(pe[4 * i + 2], stream));
			model.trainer->optimizer_step(stream, loss_scale);
			BENCH_CUDA_CHECK(cudaEventRecord(pe[4 * i + 3], stream));
		}
		BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
		std::vector<double> phase[3];
		for (uint32_t i = 0; i < opt.split; ++i) {
			for (int k = 0; k < 3; ++k) {
				float ms = 0.0f;
				BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, pe[4 * i + k], pe[4 * i + k + 1]));
				phase[k].push_back(ms);
			}
		}
		for (auto& e : pe) BENCH_CUDA_CHECK(cudaEventDestroy(e));
		for (auto& v : phase) std::sort(v.begin(), v.end());
		std::printf("SPLIT model=%s dims=%u batch=%u steps=%u forward_ms=%.4f backward_ms=%.4f optimizer_ms=%.4f\n",
			model_name.c_str(), n_in, batch, opt.split, phase[0][opt.split / 2], phase[1][opt.split / 2], phase[2][opt.split / 2]);
		std::fflush(stdout);
	}

	float loss_last = 0.0f;
	{
		auto ctx = model.trainer->training_step(stream, inputs[0], targets[0]);
		loss_last = model.trainer->loss(stream, *ctx);
	}
	BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));

	Result r;
	r.model = model_name;
	r.dims = n_in;
	r.batch = batch;
	r.jit_requested = jit;
	r.jit_active = jit_active;
	r.steps = steps;
	r.mean_ms = (double)total_ms / steps;
	r.median_chunk_ms = sorted[sorted.size() / 2];
	r.min_chunk_ms = sorted.front();
	r.max_chunk_ms = sorted.back();
	r.wall_mean_ms = std::chrono::duration<double, std::milli>(t1 - t0).count() / steps;
	r.loss_first = loss_first;
	r.loss_last = loss_last;
	r.n_params = model.network->n_params();
	return r;
}

}

int main(int argc, char** argv) {
	Options opt = parse(argc, argv);
	try {
		int dev = 0;
		BENCH_CUDA_CHECK(cudaGetDevice(&dev));
		int driver = 0;
		BENCH_CUDA_CHECK(cudaDriverGetVersion(&driver));
		const bool jit_supported = supports_jit_fusion();

		std::printf("INFO device=\"%s\" cc=%u cuda_runtime=%d cuda_driver=%d tcnn_min_gpu_arch=%d half_precision=%d jit_supported=%d\n",
			cuda_device_name().c_str(), cuda_compute_capability(), cuda_runtime_version(), driver,
			(int)MIN_GPU_ARCH, (int)TCNN_HALF_PRECISION, (int)jit_supported);
		std::printf("INFO steps=%u%s warmup=%u n_cycle=%u per_level_scale=%g\n", opt.steps[0], opt.steps.size() > 1 ? ",..." : "", opt.warmup, opt.n_cycle, opt.per_level_scale);
		std::fflush(stdout);
		if (!opt.rtc_cache.empty()) rtc_set_cache_dir(opt.rtc_cache);

		std::vector<bool> jit_modes;
		if (opt.jit == "0") jit_modes = {false};
		else if (opt.jit == "1") jit_modes = {true};
		else jit_modes = {false, true};
		if (!jit_supported) {
			bool had_jit = std::find(jit_modes.begin(), jit_modes.end(), true) != jit_modes.end();
			jit_modes.erase(std::remove(jit_modes.begin(), jit_modes.end(), true), jit_modes.end());
			if (had_jit) {
				std::printf("INFO JIT fusion not supported by this build/GPU (built without TCNN_BUILD_WITH_RTC, or no nvrtc): skipping jit=1 runs\n");
			}
			if (jit_modes.empty()) jit_modes = {false};
		}

		cudaStream_t stream;
		BENCH_CUDA_CHECK(cudaStreamCreate(&stream));

		std::vector<Result> results;
		for (uint32_t d : opt.dims) {
		for (const auto& m : opt.models) {
			for (bool jit : jit_modes) {
				for (size_t bi = 0; bi < opt.batches.size(); ++bi) {
					const uint32_t b = opt.batches[bi];
					if (b % BATCH_SIZE_GRANULARITY != 0) {
						std::printf("SKIP batch=%u is not a multiple of %u\n", b, (unsigned)BATCH_SIZE_GRANULARITY);
						continue;
					}
					Result r = run_one(opt, m, d, b, opt.steps_for(bi), jit, stream);
					results.push_back(r);
					std::printf("RESULT model=%s dims=%u batch=%u jit=%d%s steps=%u mean_ms=%.4f chunk_median_ms=%.4f chunk_min_ms=%.4f chunk_max_ms=%.4f wall_mean_ms=%.4f msamples_per_s=%.2f loss_first=%.5g loss_last=%.5g n_params=%zu\n",
						r.model.c_str(), r.dims, r.batch, (int)r.jit_active, (r.jit_requested && !r.jit_active) ? "(jit_failed)" : "",
						r.steps, r.mean_ms, r.median_chunk_ms, r.min_chunk_ms, r.max_chunk_ms, r.wall_mean_ms,
						(double)r.batch / (r.mean_ms * 1e3), r.loss_first, r.loss_last, r.n_params);
					std::fflush(stdout);
					free_all_gpu_memory_arenas();
				}
			}
		}
		}

		std::printf("\nSUMMARY (ms per training step, mean over the timed steps; H2D-free, inputs pre-generated)\n");
		std::printf("%-10s %-4s %-4s", "model", "dims", "jit");
		for (uint32_t b : opt.batches) std::printf(" %14s", ("batch=" + std::to_string(b)).c_str());
		std::printf("\n");
		for (uint32_t d : opt.dims) for (const auto& m : opt.models) {
			for (bool jit : jit_modes) {
				std::printf("%-10s %-4u %-4d", m.c_str(), d, (int)jit);
				for (uint32_t b : opt.batches) {
					auto it = std::find_if(results.begin(), results.end(), [&](const Result& r) { return r.model == m && r.dims == d && r.batch == b && r.jit_requested == jit; });
					if (it == results.end()) std::printf(" %14s", "-");
					else std::printf(" %11.4f%s", it->mean_ms, (it->jit_requested && !it->jit_active) ? " F " : " ms");
				}
				std::printf("\n");
			}
		}

		if (!opt.json_path.empty()) {
			json out = json::array();
			for (const auto& r : results) {
				out.push_back({
					{"model", r.model}, {"dims", r.dims}, {"batch", r.batch}, {"jit_requested", r.jit_requested}, {"jit_active", r.jit_active},
					{"steps", r.steps}, {"mean_ms", r.mean_ms}, {"chunk_median_ms", r.median_chunk_ms}, {"chunk_min_ms", r.min_chunk_ms},
					{"chunk_max_ms", r.max_chunk_ms}, {"wall_mean_ms", r.wall_mean_ms}, {"loss_first", r.loss_first},
					{"loss_last", r.loss_last}, {"n_params", r.n_params},
				});
			}
			std::ofstream f{opt.json_path};
			f << out.dump(2) << std::endl;
		}

		BENCH_CUDA_CHECK(cudaStreamDestroy(stream));
		free_all_gpu_memory_arenas();
	} catch (const std::exception& e) {
		std::fprintf(stderr, "ERROR: %s\n", e.what());
		return 1;
	}
	return 0;
}
