/* The small model folder of tests (see small_model.h). */
#include "small_model.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "testing.h"
#include "text/tok_internal.h"

bool dt_write_small_tokenizer(const char *path) {
  json_t *vocab = json_object();
  for (int i = 0; i < 256; i++) {
    uint32_t cp = tok_byte_to_cp((uint8_t)i);
    char k[4] = {0};
    if (cp < 0x80) k[0] = (char)cp;
    else k[0] = (char)(0xc0 | (cp >> 6)), k[1] = (char)(0x80 | (cp & 0x3f));
    json_object_set_new(vocab, k, json_integer(i));
  }
  json_t *added = json_array();
  static const char *const sp[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"};
  for (int i = 0; i < 5; i++)
    json_array_append_new(added, json_pack("{s:i,s:s,s:b,s:b}", "id", 256 + i, "content", sp[i], "special", 1,
                                           "normalized", 0));
  json_t *root = json_pack("{s:s,s:o,s:n,s:{s:s,s:b,s:b},s:{s:s,s:o,s:[]}}", "version", "1.0", "added_tokens", added,
                           "normalizer", "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1,
                           "model", "type", "BPE", "vocab", vocab, "merges");
  int r = root ? json_dump_file(root, path, 0) : -1;
  json_decref(root);
  return r == 0;
}

bool dt_make_small_model(const char *fixture, const char *model) {
  char cmd[20000];
  snprintf(cmd, sizeof cmd,
           "rm -rf '%s' && mkdir -p '%s/tokenizer' && ln -s '%s/model_index.json' '%s/' && "
           "for c in scheduler text_encoder transformer vae; do mkdir '%s'/$c && "
           "for f in '%s'/$c/*; do ln -s \"$f\" '%s'/$c/ || exit 1; done; done",
           model, model, fixture, model, model, fixture, model);
  if (dt_run(cmd, NULL) != 0) return false;
  char path[4400];
  snprintf(path, sizeof path, "%s/tokenizer/tokenizer.json", model);
  return dt_write_small_tokenizer(path);
}

void dt_write_one_tensor_shard(const char *path) {
  static const char hdr[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  unsigned char shard[8 + sizeof hdr - 1 + 8] = {(unsigned char)(sizeof hdr - 1)};
  memcpy(shard + 8, hdr, sizeof hdr - 1);
  dt_write_bytes(path, shard, sizeof shard);
}
