/* families.c - the model families this build knows (model.arch), one line each: adding a family
 * is its folder under train/models/ and a line here. */
#include <string.h>

#include "family.h"

extern const ig_family ig_family_gpt2, ig_family_llama, ig_family_dit;

/* by ig_model_arch */
static const ig_family *const families[] = {&ig_family_gpt2, &ig_family_llama, &ig_family_dit};
enum { N_FAMILIES = sizeof families / sizeof families[0] };

const char *const ig_model_archs[] = {"gpt2", "llama", "dit", NULL};

const ig_family *ig_family_of(int arch) {
    return arch >= 0 && arch < N_FAMILIES ? families[arch] : NULL;
}

const ig_family *ig_family_find(const char *arch) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (strcmp(families[i]->arch, arch) == 0) return families[i];
    return NULL;
}

const ig_family *ig_family_of_hf(const char *model_type) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (families[i]->hf_model_type && strcmp(families[i]->hf_model_type, model_type) == 0)
            return families[i];
    return NULL;
}
