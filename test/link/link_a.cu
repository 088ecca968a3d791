// test/link/link_a.cu + link_b.cu -> build/link_check: two translation units that include every header of core/,
// the model headers and (through the inference engine) twell/, linked into one binary. It builds only if every
// kernel and non-inline function defined in those headers has internal linkage (static): a duplicate symbol fails the link. Run by
// `make test` as a build step; the binary itself only prints what the two units see.
#include "core/adamw.cuh"
#include "core/attention.cuh"
#include "core/classifier.cuh"
#include "core/cuda_common.cuh"
#include "core/embedding.cuh"
#include "core/ffn.cuh"
#include "core/global_norm.cuh"
#include "core/kernel_utils.cuh"
#include "core/kv_attention.cuh"
#include "core/matmul.cuh"
#include "core/rmsnorm.cuh"
#include "core/rope.cuh"
#include "core/step_profiler.cuh"
#include "core/tc_utils.cuh"
#include "model/block.cuh"
#include "model/infer_engine.cuh"
#include "model/mc_eval_gpu.cuh"
#include "twell/train_ffn.cuh"
#include "model/sparse_dispatch.h"
#include "model/sparse_ffn.cuh"
#include "model/infer_energy.cuh"
#include "model/infer_synthetic.cuh"
#include "model/sparsity_profile.h"
#include "model/synthetic_sparsity.cuh"
#include "model/train_model.cuh"
#include "model/weights.cuh"

int link_b_param_count(const ModelConfig *c);

int main(void) {
    ModelConfig c;
    if (config_from_preset("tiny", &c) != 0) return 1;
    ParamLayout lay;
    config_param_layout(&c, &lay);
    int b = link_b_param_count(&c);
    printf("link_check: two units, %zu and %d parameters\n", lay.total, b);
    return (size_t)b == lay.total ? 0 : 1;
}
