# Tokenizer (owner: tokenizer): byte-level BPE from a checkpoint's tokenizer.json, as Hugging
# Face `tokenizers` runs it, plus the incremental detokenizer the router streams with.
# UTF-8 decode/encode/validation: the tokenizer's, and the chat-template interpreter's.
add_library(model_utf8 STATIC ${CMAKE_CURRENT_LIST_DIR}/utf8.cc)
target_include_directories(model_utf8 PUBLIC ${PROJECT_SOURCE_DIR})
mlaserve_warnings(model_utf8)

add_library(model_tokenizer STATIC
  ${CMAKE_CURRENT_LIST_DIR}/byte_level.cc
  ${CMAKE_CURRENT_LIST_DIR}/regex.cc
  ${CMAKE_CURRENT_LIST_DIR}/pretokenizer.cc
  ${CMAKE_CURRENT_LIST_DIR}/bpe.cc
  ${CMAKE_CURRENT_LIST_DIR}/added_vocabulary.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cc
  ${CMAKE_CURRENT_LIST_DIR}/detokenizer.cc)
target_include_directories(model_tokenizer PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(model_tokenizer
  PUBLIC model_utf8 mlaserve_common nlohmann_json::nlohmann_json absl::status absl::statusor absl::strings
         absl::flat_hash_map absl::synchronization
  PRIVATE PkgConfig::PCRE2)
mlaserve_warnings(model_tokenizer)
mlaserve_test(model_tokenizer_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/tokenizer_test.cc
              DEPS model_tokenizer nlohmann_json::nlohmann_json)
