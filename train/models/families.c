/* families.c - the one list of the model architectures this build knows (model.arch), each a
 * family's descriptor (family.h) in its folder under train/models/: the names of model.arch, the
 * index a shape stores (ig_model_config.arch), the lookup by name and by a Hugging Face
 * config.json's model_type all come from this list. Adding a family is its folder and a line here.
 */
#include <string.h>

#include "family/family.h"

#define IG_ARCHS(X) X(gpt2) X(llama) X(dit) X(t5) X(vae)

#define DECLARE(a) extern const ig_family ig_family_##a;
IG_ARCHS(DECLARE)
#define ENTRY(a) &ig_family_##a,
#define NAME(a)  #a,

static const ig_family *const families[] = {IG_ARCHS(ENTRY)};
enum { N_FAMILIES = sizeof families / sizeof families[0] };

const char *const ig_model_archs[] = {IG_ARCHS(NAME) NULL};

const ig_family *ig_family_of(int arch) {
    return arch >= 0 && arch < N_FAMILIES ? families[arch] : NULL;
}

int ig_family_index(const ig_family *f) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (families[i] == f) return i;
    return -1;
}

const ig_family *ig_family_find(const char *arch) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (strcmp(ig_model_archs[i], arch) == 0) return families[i];
    return NULL;
}

const ig_family *ig_family_of_hf(const char *model_type) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (families[i]->hf_model_type && strcmp(families[i]->hf_model_type, model_type) == 0)
            return families[i];
    return NULL;
}
