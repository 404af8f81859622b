/* Model folders: the two fixture folders open with the right pipeline, components and
 * configs; bad model_index.json files are rejected with a message naming the problem. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/model_dir.h"
#include "testing.h"

static void check_fixture(const char *root, const char *pipeline, const char *transformer_cls) {
  dit_error err = {0};
  dit_model_dir *d;
  dit_status s = dit_model_dir_open(root, &d, &err);
  CHECK_MSG(s == DIT_OK, "%s", err.msg);
  if (s != DIT_OK) return;
  CHECK(!strcmp(d->pipeline, pipeline));
  CHECK(d->n_components == 5);
  const dit_component *c = dit_model_dir_component(d, "transformer");
  CHECK(c && !strcmp(c->cls, transformer_cls) && !strcmp(c->library, "diffusers"));
  c = dit_model_dir_component(d, "text_encoder");
  CHECK(c && !strcmp(c->cls, "Qwen3ForCausalLM") && !strcmp(c->library, "transformers"));
  CHECK(dit_model_dir_component(d, "_class_name") == NULL);
  CHECK(dit_model_dir_component(d, "is_distilled") == NULL);
  CHECK(dit_model_dir_component(d, "nope") == NULL);
  char path[4096];
  CHECK(dit_model_dir_component_path(d, "vae", path, sizeof path, &err) == DIT_OK && strstr(path, "/vae"));
  CHECK(dit_model_dir_component_path(d, "nope", path, sizeof path, &err) == DIT_ERR_FORMAT &&
        strstr(err.msg, "nope"));
  json_t *cfg;
  s = dit_model_dir_component_config(d, "transformer", &cfg, &err);
  CHECK_MSG(s == DIT_OK && json_is_string(json_object_get(cfg, "_class_name")), "%s", err.msg);
  if (s == DIT_OK) {
    CHECK(!strcmp(json_string_value(json_object_get(cfg, "_class_name")), transformer_cls));
    json_decref(cfg);
  }
  s = dit_model_dir_component_config(d, "scheduler", &cfg, &err);
  CHECK_MSG(s == DIT_OK, "%s", err.msg);
  if (s == DIT_OK) {
    CHECK(!strcmp(json_string_value(json_object_get(cfg, "_class_name")), "FlowMatchEulerDiscreteScheduler"));
    json_decref(cfg);
  }
  /* the tokenizer folder has no config.json */
  s = dit_model_dir_component_config(d, "tokenizer", &cfg, &err);
  CHECK(s == DIT_ERR_FORMAT && strstr(err.msg, "config.json") && cfg == NULL);
  snprintf(path, sizeof path, "%s/vae", root);
  s = dit_config_load(path, &cfg, &err);
  CHECK_MSG(s == DIT_OK, "%s", err.msg);
  if (s == DIT_OK) json_decref(cfg);
  dit_model_dir_close(d);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) exit(1);
  fputs(text, f);
  fclose(f);
}

/* A folder tmp/name with model_index.json = text; expects `want` and `sub` (NULL: ok). */
static void expect_index(const dt_args *a, const char *name, const char *text, dit_status want, const char *sub) {
  char dir[4096], file[4352];
  snprintf(dir, sizeof dir, "%s/%s", a->tmp, name);
  mkdir(dir, 0777);
  snprintf(file, sizeof file, "%s/model_index.json", dir);
  if (text) write_text(file, text);
  dit_error err = {0};
  dit_model_dir *d = (dit_model_dir *)1;
  dit_status s = dit_model_dir_open(dir, &d, &err);
  if (getenv("DT_VERBOSE")) printf("%-16s %s\n", name, err.msg);
  CHECK_MSG(s == want, "%s: status %d (want %d): %s", name, s, want, err.msg);
  if (sub) CHECK_MSG(strstr(err.msg, sub) != NULL, "%s: \"%s\" lacks \"%s\"", name, err.msg, sub);
  if (s == DIT_OK)
    dit_model_dir_close(d);
  else
    CHECK(d == NULL);
}

static void test_bad_indexes(const dt_args *a) {
  expect_index(a, "ok_nulls",
               "{\"_class_name\":\"P\",\"_diffusers_version\":\"1\",\"safety_checker\":[null,null],"
               "\"feature_extractor\":null,\"flag\":true,\"size\":[1,2],\"vae\":[\"diffusers\",\"AutoencoderKL\"]}",
               DIT_OK, NULL);
  expect_index(a, "not_json", "{\"_class_name\":", DIT_ERR_FORMAT, "invalid JSON");
  expect_index(a, "not_object", "[1]", DIT_ERR_FORMAT, "object");
  expect_index(a, "no_class", "{\"vae\":[\"diffusers\",\"AutoencoderKL\"]}", DIT_ERR_FORMAT, "_class_name");
  expect_index(a, "class_not_str", "{\"_class_name\":3}", DIT_ERR_FORMAT, "_class_name");
  expect_index(a, "dotdot", "{\"_class_name\":\"P\",\"..\":[\"diffusers\",\"X\"]}", DIT_ERR_FORMAT,
               "not a plain folder name");
  expect_index(a, "slash", "{\"_class_name\":\"P\",\"a/b\":[\"diffusers\",\"X\"]}", DIT_ERR_FORMAT,
               "not a plain folder name");
  expect_index(a, "abs", "{\"_class_name\":\"P\",\"/etc\":[\"diffusers\",\"X\"]}", DIT_ERR_FORMAT,
               "not a plain folder name");
  expect_index(a, "half_null", "{\"_class_name\":\"P\",\"vae\":[\"diffusers\",null]}", DIT_ERR_FORMAT,
               "[library, class]");
  expect_index(a, "dup_key", "{\"_class_name\":\"P\",\"vae\":[\"a\",\"b\"],\"vae\":[\"a\",\"b\"]}", DIT_ERR_FORMAT,
               "duplicate");
  expect_index(a, "missing", NULL, DIT_ERR_FORMAT, "no model_index.json");
  /* a modular pipeline's [library, class, spec] entries: own-named subfolders only; [null, null, spec] skipped */
  expect_index(a, "modular_ok",
               "{\"_class_name\":\"P\",\"vae\":[\"diffusers\",\"V\",{\"subfolder\":\"vae\"}],"
               "\"ref\":[null,null,{\"subfolder\":\"\"}],\"tok\":[\"t\",\"T\",{}]}",
               DIT_OK, NULL);
  expect_index(a, "modular_elsewhere", "{\"_class_name\":\"P\",\"vae\":[\"diffusers\",\"V\",{\"subfolder\":\"../x\"}]}",
               DIT_ERR_UNSUPPORTED, "another subfolder");
  expect_index(a, "modular_sub_num", "{\"_class_name\":\"P\",\"vae\":[\"diffusers\",\"V\",{\"subfolder\":3}]}",
               DIT_ERR_UNSUPPORTED, "another subfolder");
  { /* the file itself: modular_model_index.json when model_index.json is absent */
    char dir[4096], file[4352];
    snprintf(dir, sizeof dir, "%s/modular_file", a->tmp);
    mkdir(dir, 0777);
    snprintf(file, sizeof file, "%s/modular_model_index.json", dir);
    write_text(file, "{\"_class_name\":\"M\",\"transformer\":[\"diffusers\",\"T\",{\"subfolder\":\"transformer\"}]}");
    dit_error err = {0};
    dit_model_dir *d = NULL;
    CHECK_MSG(dit_model_dir_open(dir, &d, &err) == DIT_OK, "%s", err.msg);
    CHECK(d && !strcmp(d->pipeline, "M") && d->n_components == 1 && !strcmp(d->components[0].cls, "T"));
    dit_model_dir_close(d);
  }
  /* over the 1 MiB cap */
  size_t n = (1u << 20) + 16;
  char *big = malloc(n + 1);
  memset(big, ' ', n);
  memcpy(big, "{\"_class_name\":\"P\"}", 19);
  big[n] = 0;
  expect_index(a, "too_big", big, DIT_ERR_FORMAT, "limit");
  free(big);
  /* too many components */
  char many[4096] = "{\"_class_name\":\"P\"";
  for (int i = 0; i < 20; i++)
    snprintf(many + strlen(many), sizeof many - strlen(many), ",\"c%d\":[\"diffusers\",\"X\"]", i);
  strcat(many, "}");
  expect_index(a, "many", many, DIT_ERR_FORMAT, "more than");
  /* a component named in the index without its folder */
  char dir[4096], path[4096];
  snprintf(dir, sizeof dir, "%s/ok_nulls", a->tmp);
  dit_error err = {0};
  dit_model_dir *d;
  if (dit_model_dir_open(dir, &d, &err) == DIT_OK) {
    CHECK(d->n_components == 1 && !strcmp(d->components[0].name, "vae"));
    CHECK(dit_model_dir_component_path(d, "vae", path, sizeof path, &err) == DIT_ERR_FORMAT &&
          strstr(err.msg, "missing"));
    dit_model_dir_close(d);
  }
  /* a file, not a folder */
  snprintf(path, sizeof path, "%s/ok_nulls/model_index.json", a->tmp);
  CHECK(dit_model_dir_open(path, &d, &err) == DIT_ERR_FORMAT && strstr(err.msg, "not a folder"));
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  char root[4096];
  if (a.fixture) {
    dit_error err = {0};
    dit_model_dir *d;
    CHECK_MSG(dit_model_dir_open(a.fixture, &d, &err) == DIT_OK, "%s", err.msg);
    if (!err.msg[0]) dit_model_dir_close(d);
  } else {
    snprintf(root, sizeof root, "%s/models/zimage-tiny", a.data);
    check_fixture(root, "ZImagePipeline", "ZImageTransformer2DModel");
    snprintf(root, sizeof root, "%s/models/flux2-klein-tiny", a.data);
    check_fixture(root, "Flux2KleinPipeline", "Flux2Transformer2DModel");
  }
  test_bad_indexes(&a);
  return dt_finish();
}
