"""Runs diffusers' ZImagePipeline (float32, CPU) on a model folder and writes its images as the
reference that ditrun's output is compared with (tests/test_default_model.c):
reference.json (prompts, seeds, size, steps) and reference.safetensors (per case i:
latents_init_i = torch CPU randn with the seed, image_i = H,W,3 float in [0,1] before 8-bit
rounding, ids_i = the tokenizer's ids of the chat-templated prompt).

Needs torch, transformers, safetensors and diffusers (a diffusers source tree can be put on
the path with --diffusers-src). Usage: python3 diffusers_ref.py MODEL_DIR OUT_DIR"""
import argparse
import json
import os
import sys

import torch

PROMPTS = [
    "two red circles on a blue background",
    "a yellow square above a purple triangle on a white background",
    "three green triangles on a black background",
    "an orange circle to the left of a blue square on a yellow background",
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--diffusers-src", default=".ref/py")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--size", type=int, default=128)
    a = p.parse_args()
    sys.path.insert(0, a.diffusers_src)
    from diffusers import ZImagePipeline
    from safetensors.torch import save_file

    torch.set_grad_enabled(False)
    pipe = ZImagePipeline.from_pretrained(a.model, torch_dtype=torch.float32)
    C = pipe.transformer.config.in_channels
    h = 2 * (a.size // 16)
    ref, cases = {}, []
    for i, prompt in enumerate(PROMPTS):
        seed = 42 + i
        lat = torch.randn((1, C, h, h), generator=torch.Generator().manual_seed(seed))
        out = pipe(prompt=prompt, height=a.size, width=a.size, num_inference_steps=a.steps, guidance_scale=0.0,
                   latents=lat.clone(), output_type="np")
        img = torch.from_numpy(out.images[0]).float()
        text = pipe.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                  add_generation_prompt=True, enable_thinking=True)
        ids = pipe.tokenizer(text).input_ids
        ref[f"latents_init_{i}"] = lat
        ref[f"image_{i}"] = img.contiguous()
        ref[f"ids_{i}"] = torch.tensor(ids, dtype=torch.int32)
        cases.append({"prompt": prompt, "seed": seed})
        print(f"case {i}: {prompt!r} seed {seed}: {len(ids)} tokens, image mean {img.mean():.4f}", flush=True)
    os.makedirs(a.out, exist_ok=True)
    save_file(ref, os.path.join(a.out, "reference.safetensors"))
    json.dump({"width": a.size, "height": a.size, "steps": a.steps, "guidance_scale": 0.0, "cases": cases,
               "note": "diffusers ZImagePipeline, float32 on the CPU; latents_init_i = torch.randn((1, C, h, w), "
                       "generator=torch.Generator().manual_seed(seed)); images HWC in [0,1] before 8-bit rounding"},
              open(os.path.join(a.out, "reference.json"), "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
