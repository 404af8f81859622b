/* A model folder for tests that run whole generations many times: symlinks to a fixture's
 * files, with a small tokenizer.json in place of the fixture's 11 MB one (which would make
 * every run spend its time in the JSON parser). */
#ifndef DIT_TEST_SMALL_MODEL_H
#define DIT_TEST_SMALL_MODEL_H

#include <stdbool.h>

/* Writes a byte-level BPE tokenizer.json to path: the 256 byte tokens (ids 0..255), no
 * merges, and Qwen3's special tokens as ids 256..260. */
bool dt_write_small_tokenizer(const char *path);
/* Makes folder `model` (removed first): model_index.json and every file of the scheduler,
 * text_encoder, transformer and vae components of `fixture` as symlinks, the components as
 * real folders (so a test can replace one file), and tokenizer/ holding the small
 * tokenizer.json. */
bool dt_make_small_model(const char *fixture, const char *model);
/* Writes a .safetensors file holding one F32 tensor "w" of shape [2] (zeros): the shard
 * that index files of tests name. */
void dt_write_one_tensor_shard(const char *path);

#endif
