# model runtime (owner: runtime): the paged KV pool, RoPE tables, DeepSeek weights and forward,
# the sampler, the mlaserve-run CLI and their tests.

# The KV pool stands alone so that serving code can link it without the model.
add_library(model_kv_pool STATIC ${CMAKE_CURRENT_LIST_DIR}/kv_pool.cc
                                 ${CMAKE_CURRENT_LIST_DIR}/kv_pool_copy.cc
                                 ${CMAKE_CURRENT_LIST_DIR}/kv_prefix_index.cc
                                 ${CMAKE_CURRENT_LIST_DIR}/kv_pool_sizing.cc)
target_include_directories(model_kv_pool PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(model_kv_pool PUBLIC mlaserve_kernels_common kernels_kv_pack mlaserve_parallel absl::status
                      absl::statusor absl::strings absl::synchronization absl::time)
if(MLASERVE_WITH_CUDA)
  target_compile_definitions(model_kv_pool PRIVATE MLASERVE_MODEL_HAS_CUDA=1)
  target_link_libraries(model_kv_pool PUBLIC CUDA::cudart_static)
endif()
mlaserve_warnings(model_kv_pool)
mlaserve_test(model_kv_pool_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_pool_test.cc
              ${CMAKE_CURRENT_LIST_DIR}/kv_pool_batch_test.cc
              ${CMAKE_CURRENT_LIST_DIR}/kv_pool_prefix_test.cc
              ${CMAKE_CURRENT_LIST_DIR}/kv_pool_sizing_test.cc DEPS model_kv_pool)
if(MLASERVE_WITH_CUDA AND MLASERVE_BUILD_TESTS)
  # The batched page copies on a GPU (gather/scatter kernels, copy lanes, fences).
  mlaserve_test(model_kv_pool_cuda_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_pool_batch_test.cc
                DEPS model_kv_pool CUDA::cudart_static LABELS gpu)
  target_compile_definitions(model_kv_pool_cuda_test PRIVATE MLASERVE_KV_POOL_TEST_CUDA=1)
endif()

# RoPE frequency / cos-sin tables (default and YaRN, as Hugging Face computes them).
add_library(model_rope STATIC ${CMAKE_CURRENT_LIST_DIR}/rope.cc)
target_include_directories(model_rope PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(model_rope PUBLIC absl::status absl::statusor absl::strings)
mlaserve_warnings(model_rope)
mlaserve_test(model_rope_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/rope_test.cc DEPS model_rope)

# Host-side sampling options and the batched call into kernels/sampling.
add_library(model_sampler STATIC ${CMAKE_CURRENT_LIST_DIR}/sampler.cc)
target_include_directories(model_sampler PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(model_sampler PUBLIC kernels_sampling mlaserve_request_limits absl::status
                      absl::statusor absl::strings)
mlaserve_warnings(model_sampler)

# Zero padding of weight matrices to the widths the engine stores (model/mla_dims.h).
add_library(model_padded_matrix STATIC ${CMAKE_CURRENT_LIST_DIR}/padded_matrix.cc)
target_include_directories(model_padded_matrix PUBLIC ${PROJECT_SOURCE_DIR})
mlaserve_warnings(model_padded_matrix)
mlaserve_test(model_padded_matrix_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/padded_matrix_test.cc
              DEPS model_padded_matrix)

# How one worker's model is split over its ranks (ParallelLayout, docs/parallel.md).
add_library(model_parallel_layout STATIC ${CMAKE_CURRENT_LIST_DIR}/parallel_layout.cc)
target_include_directories(model_parallel_layout PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(model_parallel_layout PUBLIC model_loader mlaserve_parallel absl::status
                      absl::statusor absl::strings)
mlaserve_warnings(model_parallel_layout)
mlaserve_test(model_parallel_layout_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/parallel_layout_test.cc
              DEPS model_parallel_layout)
# The widths the hidden state and the MLP intermediates are stored at (model_widths.h, a header).
mlaserve_test(model_widths_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_widths_test.cc
              DEPS model_parallel_layout model_loader nlohmann_json::nlohmann_json)

# The DeepSeek weights as one rank holds them (LoadDeepseekWeights, through WeightLoader's
# reads, slices and zero padding), and the thin ops over them (forward_ops.h) that every block
# of the forward calls.
add_library(model_weights STATIC
  ${CMAKE_CURRENT_LIST_DIR}/deepseek_weights.cc
  ${CMAKE_CURRENT_LIST_DIR}/weight_loader.cc
  ${CMAKE_CURRENT_LIST_DIR}/forward_ops.cc)
target_include_directories(model_weights PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(model_weights PUBLIC model_loader model_parallel_layout model_padded_matrix
                      model_device_memory mlaserve_kernels mlaserve_common)
mlaserve_warnings(model_weights)

# The DeepSeek forward (Engine::Create) over the kernel API.
add_library(model_runtime STATIC
  ${CMAKE_CURRENT_LIST_DIR}/engine.cc
  ${CMAKE_CURRENT_LIST_DIR}/deepseek_engine.cc
  ${CMAKE_CURRENT_LIST_DIR}/deepseek_engine_prompt_logprobs.cc
  ${CMAKE_CURRENT_LIST_DIR}/parallel_step.cc
  ${CMAKE_CURRENT_LIST_DIR}/parallel_graph_plan.cc
  ${CMAKE_CURRENT_LIST_DIR}/parallel_engine.cc)
target_link_libraries(model_runtime PUBLIC model_layers model_kv_cache model_weights model_step model_loader model_kv_pool model_rope model_sampler
                      model_padded_matrix model_device_memory mlaserve_kernels mlaserve_parallel
                      mlaserve_common)
mlaserve_warnings(model_runtime)
if(TARGET mlaserve_parallel_nccl)  # multi-GPU workers (ParallelEngine) talk NCCL
  target_link_libraries(model_runtime PUBLIC mlaserve_parallel_nccl)
endif()

# Diagnostics over a step's intermediate values (model/deepseek_engine_probe.h) and the tool that
# uses them; not linked into serving binaries.
add_library(model_engine_probe STATIC ${CMAKE_CURRENT_LIST_DIR}/deepseek_engine_probe.cc)
target_link_libraries(model_engine_probe PUBLIC model_runtime)
mlaserve_warnings(model_engine_probe)
add_executable(mlaserve-route-probe ${CMAKE_CURRENT_LIST_DIR}/route_probe_main.cc)
target_link_libraries(mlaserve-route-probe PRIVATE model_engine_probe CLI11::CLI11
                      nlohmann_json::nlohmann_json)
mlaserve_warnings(mlaserve-route-probe)

# mlaserve-run: one-process generation from a checkpoint.
add_executable(mlaserve-run ${CMAKE_CURRENT_LIST_DIR}/run_main.cc)
target_link_libraries(mlaserve-run PRIVATE model_runtime model_sampler model_tokenizer
                      model_constraint CLI11::CLI11 nlohmann_json::nlohmann_json)
mlaserve_warnings(mlaserve-run)
install(TARGETS mlaserve-run RUNTIME DESTINATION bin)

if(MLASERVE_BUILD_TESTS)
  mlaserve_test(model_sampler_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/sampler_test.cc
                ${CMAKE_CURRENT_LIST_DIR}/sampler_openai_test.cc
                ${CMAKE_CURRENT_LIST_DIR}/sampler_mask_test.cc
                DEPS model_sampler)
  # Reference tests over tests/fixtures/models (tools/make_fixtures.py).
  mlaserve_test(model_engine_reference_test
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_reference_test.cc
                DEPS model_runtime nlohmann_json::nlohmann_json TIMEOUT 600)
  # Prompt logprobs (SequenceChunk::prompt_targets) against every prefix's logits and HF's, in
  # chunks, slices, beside other sequences, tensor-parallel; data-parallel refused.
  mlaserve_test(model_engine_prompt_logprobs_test
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_prompt_logprobs_test.cc
                DEPS model_runtime nlohmann_json::nlohmann_json TIMEOUT 600)
  if(MLASERVE_WITH_CUDA)  # the same cases on the GPU (bf16 bounds); tp=2 needs two GPUs
    mlaserve_test(model_engine_prompt_logprobs_cuda_test
                  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_prompt_logprobs_test.cc
                  DEPS model_runtime model_engine_probe nlohmann_json::nlohmann_json LABELS gpu
                  TIMEOUT 600)
    target_compile_definitions(model_engine_prompt_logprobs_cuda_test
                               PRIVATE MLASERVE_PROMPT_LOGPROBS_TEST_CUDA=1)
  endif()
  # Expert routing per position and teacher-forced tokens vs HF (deepseek_v3_top3); the CUDA
  # build of the same test carries label gpu.
  mlaserve_test(model_engine_routing_test
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_routing_test.cc
                DEPS model_engine_probe nlohmann_json::nlohmann_json TIMEOUT 600)
  # The CPU engine's routing margins (model/testing/routing_margins.h) vs HF's recorded ones.
  mlaserve_test(model_routing_margins_test
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/testing/routing_margins_test.cc
                DEPS model_engine_probe nlohmann_json::nlohmann_json TIMEOUT 300)
  if(MLASERVE_WITH_CUDA)
    mlaserve_test(model_engine_routing_cuda_test
                  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_routing_test.cc
                  DEPS model_engine_probe nlohmann_json::nlohmann_json LABELS gpu TIMEOUT 600)
    target_compile_definitions(model_engine_routing_cuda_test PRIVATE MLASERVE_ROUTING_TEST_CUDA=1)
  endif()
  # The fp8 KV cache (DeepSeek's layout) on the V3.2 fixture.
  mlaserve_test(model_engine_fp8_test
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_fp8_test.cc
                DEPS model_runtime nlohmann_json::nlohmann_json TIMEOUT 600)
  # Every parallel layout (N = 2, 4 ranks on threads, the fake collective) against the
  # single-rank engine on the fixtures (docs/parallel.md).
  mlaserve_test(model_engine_parallel_test
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_parallel_test.cc
                DEPS model_runtime mlaserve_parallel nlohmann_json::nlohmann_json TIMEOUT 600)
  # Data-parallel attention as a worker serves it: each rank its own requests and pool.
  mlaserve_test(model_engine_parallel_data_test
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_parallel_data_test.cc
                DEPS model_runtime nlohmann_json::nlohmann_json TIMEOUT 600)
  # ParallelEngine::ForwardInto: Forward's result in storage kept across steps.
  mlaserve_test(model_engine_parallel_into_test
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_parallel_into_test.cc
                DEPS model_runtime nlohmann_json::nlohmann_json TIMEOUT 300)
  # The same layouts on GPUs with NCCL (label gpu; 2 GPUs, 4 for the 4-rank cases): graph
  # steps, the fixed-capacity all-to-all, data-parallel layer streaming.
  if(TARGET mlaserve_parallel_nccl)
    mlaserve_test(model_engine_parallel_cuda_test
                  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_parallel_cuda_test.cc
                  DEPS model_runtime nlohmann_json::nlohmann_json LABELS gpu TIMEOUT 600)
  endif()
  # LoadDeepseekWeights' zero padding of hidden / intermediate widths (model_widths.h) on the
  # padded fixtures, one rank and a rank of a sharded layout; its checks of the routed experts
  # against the config before their stack is sized (rewritten fixtures).
  mlaserve_test(model_weights_test
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/deepseek_weights_test.cc
                        ${CMAKE_CURRENT_LIST_DIR}/deepseek_weights_checks_test.cc
                DEPS model_runtime mlaserve_parallel nlohmann_json::nlohmann_json)
  mlaserve_test(model_engine_behavior_test
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_behavior_test.cc
                DEPS model_runtime model_sampler nlohmann_json::nlohmann_json TIMEOUT 600)

  # mlaserve-run end to end on the V3 fixture: chunked prefill, greedy decode, --dump-logits
  # checked against the HF reference.
  add_executable(run_dump_check ${CMAKE_CURRENT_LIST_DIR}/run_dump_check.cc)
  target_link_libraries(run_dump_check PRIVATE nlohmann_json::nlohmann_json)
  set(_fixture ${PROJECT_SOURCE_DIR}/tests/fixtures/models/deepseek_v3)
  add_test(NAME mlaserve_run_fixture
    COMMAND sh -c "set -e; ids=$($<TARGET_FILE:run_dump_check> ids ${_fixture}/expected.json 2); \
$<TARGET_FILE:mlaserve-run> --model ${_fixture} --prompt-ids $ids --max-new-tokens 16 \
--ignore-eos --chunk-size 24 --print-ids --dump-logits ${CMAKE_CURRENT_BINARY_DIR}/run_dump.json; \
$<TARGET_FILE:run_dump_check> check ${CMAKE_CURRENT_BINARY_DIR}/run_dump.json ${_fixture}/expected.json 2"
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(mlaserve_run_fixture PROPERTIES TIMEOUT 300)
  # mlaserve-run --tp-size 2 and 4 in every layout prints the single-rank run's tokens (V2,
  # V3, V3.2 fixtures); bad layout flags are refused naming the value.
  set(_fixtures ${PROJECT_SOURCE_DIR}/tests/fixtures/models)
  add_test(NAME mlaserve_run_parallel_layouts
    COMMAND sh -c "set -e; for m in deepseek_v2 deepseek_v3 deepseek_v32; do \
ids=$($<TARGET_FILE:run_dump_check> ids ${_fixtures}/$m/expected.json 2); \
sh ${CMAKE_CURRENT_LIST_DIR}/run_parallel_check.sh $<TARGET_FILE:mlaserve-run> ${_fixtures}/$m $ids; done"
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(mlaserve_run_parallel_layouts PROPERTIES TIMEOUT 300)
endif()

if(MLASERVE_BUILD_TESTS)
  # The bundled demo model answers its task through mlaserve-run (text in, text out).
  add_test(NAME mlaserve_run_demo_answers
    COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/demo/check_demo_answers.py
            $<TARGET_FILE:mlaserve-run> ${PROJECT_SOURCE_DIR}/models/demo
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(mlaserve_run_demo_answers PROPERTIES TIMEOUT 300)
endif()
