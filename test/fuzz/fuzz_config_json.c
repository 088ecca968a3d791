// Fuzz target: a checkpoint's config.json (core/checkpoint.c ckpt_read_config_json). A config that is accepted
// must pass config_validate and give a parameter layout.
#include "fuzz_util.h"
#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512], err[1024];
    fuzz_write("config.json", data, size, path, sizeof path);
    ModelConfig c;
    if (ckpt_read_config_json(path, &c, err, sizeof err) != 0) return 0;
    char verr[256];
    if (config_validate(&c, verr, sizeof verr) != 0) abort();
    ParamLayout lay;
    config_param_layout(&c, &lay);
    return 0;
}
