// test/link/link_b.cu: the second unit of build/link_check (see link_a.cu).
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

int link_b_param_count(const ModelConfig *c) {
    ParamLayout lay;
    config_param_layout(c, &lay);
    return (int)lay.total;
}
