// kv_page_copy dispatcher: can-implement check, then the backend.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"
#include "kernels/kv_pack/api.h"

namespace mlaserve::kernels {

absl::Status KvPageCopy(const KvPageCopyParams& p, const KernelContext& ctx) {
  if (p.num_pages < 0 || p.num_pages > kMaxPageCopyPages) {
    return absl::InvalidArgumentError(absl::StrCat("kv_page_copy: num_pages is ", p.num_pages,
                                                   "; one call takes [0, ", kMaxPageCopyPages,
                                                   "]"));
  }
  if (p.num_planes < 1 || p.num_planes > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_page_copy: num_planes is ", p.num_planes, "; it must be 1 or 2"));
  }
  if (p.num_pages == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("staging", p.staging));
  for (int k = 0; k < p.num_planes; ++k) {
    RETURN_IF_ERROR(RequireNonNull("planes[].base", p.planes[k].base));
    RETURN_IF_ERROR(RequirePositive("planes[].page_bytes", p.planes[k].page_bytes));
  }
  for (int i = 0; i < p.num_pages; ++i) {
    if (p.page_ids[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("kv_page_copy: page_ids[", i, "] is ",
                                                     p.page_ids[i], "; page ids are >= 0"));
    }
  }
  MLASERVE_DISPATCH("kv_page_copy", ctx, KvPageCopyCpu(p), KvPageCopyCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
