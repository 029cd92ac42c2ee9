// GpuProfile <-> JSON. Reading never throws: every access checks presence and type first and
// an error names the field's path ("mha_mla.cells[2].se_threshold: expected an integer").
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "profiles/gpu_profile.h"

namespace mlaserve::profiles {
namespace {

using nlohmann::json;

constexpr char kFormat[] = "mlaserve-gpu-profile";

absl::Status FieldError(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("profile field ", path, ": ", what));
}

// A JSON object with its path, for reading fields with errors that name them.
class Reader {
 public:
  Reader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  std::string Path(const std::string& key) const {
    return path_.empty() ? key : absl::StrCat(path_, ".", key);
  }

  bool Has(const std::string& key) const { return j_.contains(key); }

  absl::StatusOr<const json*> Get(const std::string& key, bool required = true) const {
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) return FieldError(Path(key), "is missing");
      return static_cast<const json*>(nullptr);
    }
    return &*it;
  }

  absl::Status Int(const std::string& key, int64_t* out, bool required = true) const {
    ASSIGN_OR_RETURN(const json* v, Get(key, required));
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number_integer()) {
      return FieldError(Path(key), absl::StrCat("expected an integer, got ", v->dump()));
    }
    *out = v->get<int64_t>();
    return absl::OkStatus();
  }

  absl::Status Int(const std::string& key, int* out, bool required = true) const {
    int64_t v = *out;
    RETURN_IF_ERROR(Int(key, &v, required));
    if (v < INT32_MIN || v > INT32_MAX) {
      return FieldError(Path(key), absl::StrCat(v, " does not fit in 32 bits"));
    }
    *out = static_cast<int>(v);
    return absl::OkStatus();
  }

  absl::Status Double(const std::string& key, double* out, bool required = true) const {
    ASSIGN_OR_RETURN(const json* v, Get(key, required));
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number()) {
      return FieldError(Path(key), absl::StrCat("expected a number, got ", v->dump()));
    }
    *out = v->get<double>();
    return absl::OkStatus();
  }

  absl::Status String(const std::string& key, std::string* out, bool required = true) const {
    ASSIGN_OR_RETURN(const json* v, Get(key, required));
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_string()) {
      return FieldError(Path(key), absl::StrCat("expected a string, got ", v->dump()));
    }
    *out = v->get<std::string>();
    return absl::OkStatus();
  }

  absl::Status Bool(const std::string& key, bool* out, bool required = true) const {
    ASSIGN_OR_RETURN(const json* v, Get(key, required));
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) {
      return FieldError(Path(key), absl::StrCat("expected true or false, got ", v->dump()));
    }
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  // An optional number: absent stays nullopt.
  absl::Status OptionalDouble(const std::string& key, std::optional<double>* out) const {
    ASSIGN_OR_RETURN(const json* v, Get(key, false));
    if (v == nullptr) return absl::OkStatus();
    double d = 0.0;
    RETURN_IF_ERROR(Double(key, &d));
    *out = d;
    return absl::OkStatus();
  }

  // "auto" | "ours" | "cudnn".
  absl::Status Provider(const std::string& key, MhaPrefillProvider* out) const {
    std::string name;
    RETURN_IF_ERROR(String(key, &name));
    return ProviderNamed(name, Path(key), out);
  }

  static absl::Status ProviderNamed(const std::string& name, const std::string& path,
                                    MhaPrefillProvider* out) {
    const std::optional<MhaPrefillProvider> p = MhaProviderFromName(name);
    if (!p.has_value()) {
      return FieldError(path, absl::StrCat("'", name, "' is not one of auto, ours, cudnn"));
    }
    *out = *p;
    return absl::OkStatus();
  }

  // A field that only a later format version has: refused in an older document, so a file
  // whose version was not bumped cannot pass for something it is not.
  absl::Status Absent(const std::string& key, int version) const {
    if (j_.contains(key)) {
      return FieldError(Path(key), absl::StrCat("is a version 2 field, but the profile says version ",
                                                version));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Reader> Object(const std::string& key) const {
    ASSIGN_OR_RETURN(const json* v, Get(key));
    if (!v->is_object()) return FieldError(Path(key), "expected an object");
    return Reader(*v, Path(key));
  }

  // The array at key (required); its elements are read by the caller.
  absl::StatusOr<const json*> Array(const std::string& key, bool required = true) const {
    ASSIGN_OR_RETURN(const json* v, Get(key, required));
    if (v == nullptr) return v;
    if (!v->is_array()) return FieldError(Path(key), "expected an array");
    return v;
  }

  absl::Status IntArray(const std::string& key, std::vector<int64_t>* out) const {
    ASSIGN_OR_RETURN(const json* a, Array(key));
    out->clear();
    for (size_t i = 0; i < a->size(); ++i) {
      if (!(*a)[i].is_number_integer()) {
        return FieldError(absl::StrCat(Path(key), "[", i, "]"),
                          absl::StrCat("expected an integer, got ", (*a)[i].dump()));
      }
      out->push_back((*a)[i].get<int64_t>());
    }
    return absl::OkStatus();
  }

 private:
  const json& j_;
  std::string path_;
};

absl::StatusOr<Reader> Element(const json& array, const std::string& path, size_t i) {
  const std::string p = absl::StrCat(path, "[", i, "]");
  if (!array[i].is_object()) return FieldError(p, "expected an object");
  return Reader(array[i], p);
}

// Version 2's provider fields of one cell; in version 1 they must be absent (provider kAuto).
absl::Status ReadCellProvider(const Reader& c, int version, MhaMlaCell* cell) {
  if (version < 2) {
    for (const char* key : {"mha_provider", "mha_ours_us", "mha_cudnn_us"}) {
      RETURN_IF_ERROR(c.Absent(key, version));
    }
    cell->mha_provider = MhaPrefillProvider::kAuto;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(c.Provider("mha_provider", &cell->mha_provider));
  RETURN_IF_ERROR(c.OptionalDouble("mha_ours_us", &cell->mha_ours_us));
  return c.OptionalDouble("mha_cudnn_us", &cell->mha_cudnn_us);
}

// The split threshold of a fresh-prompt cell (version 2, optional; MhaMlaCell).
absl::Status ReadCellSplit(const Reader& c, int version, MhaMlaCell* cell) {
  if (version < 2) {
    for (const char* key : {"split_se_threshold", "split_samples", "split_wins"}) {
      RETURN_IF_ERROR(c.Absent(key, version));
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const json* v, c.Get("split_se_threshold", false));
  if (v == nullptr) {
    for (const char* key : {"split_samples", "split_wins"}) {
      if (c.Has(key)) return FieldError(c.Path(key), "is given without split_se_threshold");
    }
    return absl::OkStatus();
  }
  int64_t threshold = 0;
  RETURN_IF_ERROR(c.Int("split_se_threshold", &threshold));
  cell->split_se_threshold = threshold;
  RETURN_IF_ERROR(c.Int("split_samples", &cell->split_samples, false));
  return c.Int("split_wins", &cell->split_wins, false);
}

// The providers the tuner timed (version 2): an array of names, possibly empty.
absl::Status ReadTimedProviders(const Reader& t, int version, MhaMlaTable* table) {
  if (version < 2) {
    RETURN_IF_ERROR(t.Absent("mha_providers", version));
    return t.Absent("cudnn_version", version);
  }
  ASSIGN_OR_RETURN(const json* list, t.Array("mha_providers"));
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string path = absl::StrCat(t.Path("mha_providers"), "[", i, "]");
    if (!(*list)[i].is_string()) {
      return FieldError(path, absl::StrCat("expected a string, got ", (*list)[i].dump()));
    }
    MhaPrefillProvider p = MhaPrefillProvider::kAuto;
    RETURN_IF_ERROR(Reader::ProviderNamed((*list)[i].get<std::string>(), path, &p));
    table->mha_providers.push_back(p);
  }
  return t.String("cudnn_version", &table->cudnn_version, false);
}

absl::Status ReadCells(const Reader& t, int version, MhaMlaTable* table) {
  ASSIGN_OR_RETURN(const json* cells, t.Array("cells"));
  for (size_t i = 0; i < cells->size(); ++i) {
    ASSIGN_OR_RETURN(Reader c, Element(*cells, t.Path("cells"), i));
    MhaMlaCell cell;
    RETURN_IF_ERROR(c.Int("batch", &cell.batch));
    RETURN_IF_ERROR(c.Int("prefix", &cell.prefix));
    RETURN_IF_ERROR(c.Int("extend", &cell.extend));
    RETURN_IF_ERROR(c.Int("se_threshold", &cell.se_threshold));
    RETURN_IF_ERROR(ReadCellProvider(c, version, &cell));
    RETURN_IF_ERROR(ReadCellSplit(c, version, &cell));
    RETURN_IF_ERROR(c.Int("samples", &cell.samples, false));
    RETURN_IF_ERROR(c.Int("above_mha_wins", &cell.above_mha_wins, false));
    RETURN_IF_ERROR(c.Int("above_total", &cell.above_total, false));
    RETURN_IF_ERROR(c.Int("below_mha_wins", &cell.below_mha_wins, false));
    RETURN_IF_ERROR(c.Int("below_total", &cell.below_total, false));
    table->cells.push_back(cell);
  }
  return absl::OkStatus();
}

absl::Status ReadProfile(const Reader& r, GpuProfile* p) {
  std::string format;
  RETURN_IF_ERROR(r.String("format", &format));
  if (format != kFormat) {
    return FieldError("format", absl::StrCat("'", format, "' is not '", kFormat, "'"));
  }
  int version = 0;
  RETURN_IF_ERROR(r.Int("version", &version));
  if (version < GpuProfile::kOldestReadableVersion || version > GpuProfile::kFormatVersion) {
    return FieldError("version", absl::StrCat(version, " is not supported (this build reads ",
                                              GpuProfile::kOldestReadableVersion, " to ",
                                              GpuProfile::kFormatVersion, ")"));
  }
  RETURN_IF_ERROR(r.String("origin", &p->origin));
  RETURN_IF_ERROR(r.String("created", &p->created, false));

  ASSIGN_OR_RETURN(Reader d, r.Object("device"));
  RETURN_IF_ERROR(d.String("name", &p->device.name));
  RETURN_IF_ERROR(d.String("compute_capability", &p->device.compute_capability, false));
  RETURN_IF_ERROR(d.Int("sm_count", &p->device.sm_count));
  RETURN_IF_ERROR(d.Int("smem_optin_bytes", &p->device.smem_optin_bytes));
  RETURN_IF_ERROR(d.Double("copy_gbs", &p->device.copy_gbs));
  RETURN_IF_ERROR(d.Double("matrix_tflops", &p->device.matrix_tflops));

  ASSIGN_OR_RETURN(Reader s, r.Object("shape"));
  RETURN_IF_ERROR(s.Int("heads", &p->shape.heads));
  RETURN_IF_ERROR(s.Int("qk_nope_head_dim", &p->shape.qk_nope_head_dim));
  RETURN_IF_ERROR(s.Int("qk_rope_head_dim", &p->shape.qk_rope_head_dim));
  RETURN_IF_ERROR(s.Int("v_head_dim", &p->shape.v_head_dim));
  RETURN_IF_ERROR(s.Int("kv_lora_rank", &p->shape.kv_lora_rank));
  RETURN_IF_ERROR(s.String("dtype", &p->shape.dtype));

  ASSIGN_OR_RETURN(Reader t, r.Object("mha_mla"));
  RETURN_IF_ERROR(t.Int("max_batch", &p->mha_mla.max_batch));
  RETURN_IF_ERROR(t.IntArray("prefix_edges", &p->mha_mla.prefix_edges));
  RETURN_IF_ERROR(t.IntArray("extend_edges", &p->mha_mla.extend_edges));
  RETURN_IF_ERROR(ReadTimedProviders(t, version, &p->mha_mla));
  RETURN_IF_ERROR(ReadCells(t, version, &p->mha_mla));

  ASSIGN_OR_RETURN(Reader sp, r.Object("sparse"));
  RETURN_IF_ERROR(sp.Int("decode_max_rows", &p->sparse.decode_max_rows));
  RETURN_IF_ERROR(sp.Int("sparse_fwd_min_rows", &p->sparse.sparse_fwd_min_rows));
  RETURN_IF_ERROR(sp.Bool("measured", &p->sparse.measured, false));

  ASSIGN_OR_RETURN(const json* splits, r.Array("decode_splits", false));
  if (splits != nullptr) {
    for (size_t i = 0; i < splits->size(); ++i) {
      ASSIGN_OR_RETURN(Reader e, Element(*splits, "decode_splits", i));
      DecodeSplit ds;
      RETURN_IF_ERROR(e.Int("batch", &ds.batch));
      RETURN_IF_ERROR(e.Int("max_seqlen_k", &ds.max_seqlen_k));
      RETURN_IF_ERROR(e.Int("num_splits", &ds.num_splits));
      RETURN_IF_ERROR(e.Int("chunk_tokens", &ds.chunk_tokens));
      p->decode_splits.push_back(ds);
    }
  }
  RETURN_IF_ERROR(r.Int("chunk_size", &p->chunk_size));
  RETURN_IF_ERROR(r.Int("local_prefill_threshold", &p->local_prefill_threshold));
  ASSIGN_OR_RETURN(Reader pe, r.Object("prefill_estimate"));
  RETURN_IF_ERROR(pe.Double("attn_us_per_token", &p->prefill_estimate.attn_us_per_token));
  RETURN_IF_ERROR(pe.Double("attn_us_per_token_sq", &p->prefill_estimate.attn_us_per_token_sq));
  RETURN_IF_ERROR(pe.Double("dense_us_per_token", &p->prefill_estimate.dense_us_per_token));
  return absl::OkStatus();
}

}  // namespace

std::string ProfileToJson(const GpuProfile& p) {
  json cells = json::array();
  for (const MhaMlaCell& c : p.mha_mla.cells) {
    json cell = {{"batch", c.batch}, {"prefix", c.prefix}, {"extend", c.extend},
                 {"se_threshold", c.se_threshold},
                 {"mha_provider", kernels::MhaPrefillProviderName(c.mha_provider)},
                 {"samples", c.samples},
                 {"above_mha_wins", c.above_mha_wins}, {"above_total", c.above_total},
                 {"below_mha_wins", c.below_mha_wins}, {"below_total", c.below_total}};
    if (c.mha_ours_us.has_value()) cell["mha_ours_us"] = *c.mha_ours_us;
    if (c.mha_cudnn_us.has_value()) cell["mha_cudnn_us"] = *c.mha_cudnn_us;
    if (c.split_se_threshold.has_value()) {
      cell["split_se_threshold"] = *c.split_se_threshold;
      cell["split_samples"] = c.split_samples;
      cell["split_wins"] = c.split_wins;
    }
    cells.push_back(std::move(cell));
  }
  json timed = json::array();
  for (MhaPrefillProvider provider : p.mha_mla.mha_providers) {
    timed.push_back(kernels::MhaPrefillProviderName(provider));
  }
  json splits = json::array();
  for (const DecodeSplit& d : p.decode_splits) {
    splits.push_back({{"batch", d.batch}, {"max_seqlen_k", d.max_seqlen_k},
                      {"num_splits", d.num_splits}, {"chunk_tokens", d.chunk_tokens}});
  }
  json doc = {
      {"format", kFormat},
      {"version", GpuProfile::kFormatVersion},
      {"origin", p.origin},
      {"created", p.created},
      {"device",
       {{"name", p.device.name}, {"compute_capability", p.device.compute_capability},
        {"sm_count", p.device.sm_count}, {"smem_optin_bytes", p.device.smem_optin_bytes},
        {"copy_gbs", p.device.copy_gbs}, {"matrix_tflops", p.device.matrix_tflops}}},
      {"shape",
       {{"heads", p.shape.heads}, {"qk_nope_head_dim", p.shape.qk_nope_head_dim},
        {"qk_rope_head_dim", p.shape.qk_rope_head_dim}, {"v_head_dim", p.shape.v_head_dim},
        {"kv_lora_rank", p.shape.kv_lora_rank}, {"dtype", p.shape.dtype}}},
      {"mha_mla",
       {{"max_batch", p.mha_mla.max_batch}, {"prefix_edges", p.mha_mla.prefix_edges},
        {"extend_edges", p.mha_mla.extend_edges}, {"mha_providers", timed},
        {"cudnn_version", p.mha_mla.cudnn_version}, {"cells", cells}}},
      {"sparse",
       {{"decode_max_rows", p.sparse.decode_max_rows},
        {"sparse_fwd_min_rows", p.sparse.sparse_fwd_min_rows},
        {"measured", p.sparse.measured}}},
      {"decode_splits", splits},
      {"chunk_size", p.chunk_size},
      {"local_prefill_threshold", p.local_prefill_threshold},
      {"prefill_estimate",
       {{"attn_us_per_token", p.prefill_estimate.attn_us_per_token},
        {"attn_us_per_token_sq", p.prefill_estimate.attn_us_per_token_sq},
        {"dense_us_per_token", p.prefill_estimate.dense_us_per_token}}},
  };
  return doc.dump(1) + "\n";
}

absl::StatusOr<GpuProfile> ProfileFromJson(const std::string& text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("profile is not valid JSON");
  if (!doc.is_object()) return absl::InvalidArgumentError("profile is not a JSON object");
  GpuProfile p;
  RETURN_IF_ERROR(ReadProfile(Reader(doc, ""), &p));
  RETURN_IF_ERROR(ValidateProfile(p));
  return p;
}

absl::Status SaveProfile(const GpuProfile& p, const std::string& path) {
  RETURN_IF_ERROR(ValidateProfile(p));
  std::ofstream f(path, std::ios::trunc);
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  f << ProfileToJson(p);
  f.close();
  if (!f) return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

absl::StatusOr<GpuProfile> LoadProfile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read profile ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  auto p = ProfileFromJson(ss.str());
  if (!p.ok()) {
    return absl::Status(p.status().code(), absl::StrCat(path, ": ", p.status().message()));
  }
  return p;
}

}  // namespace mlaserve::profiles
