"""The procedural data set: scenes of flat colored shapes on a plain background, each with a
caption that names them, and the automatic check that scores a generated image against its
caption. Two kinds of scene:

  group: "two red circles on a blue background"          (1-3 equal shapes, anywhere)
  pair:  "a green square above a white triangle on a black background"
         (relations: above, below, to the left of, to the right of)

A fixed tenth of all possible captions (chosen by a hash of the caption text) never appears
in training: those are the held-out captions the model is evaluated on."""
import hashlib
import math

import numpy as np
import torch

SIZE = 128
COLORS = {
    "red": (215, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 80, 215),
    "yellow": (240, 205, 40),
    "purple": (135, 60, 175),
    "orange": (240, 135, 30),
    "white": (240, 240, 240),
    "black": (30, 30, 30),
}
COLOR_NAMES = list(COLORS)
SHAPES = ["circle", "square", "triangle"]
COUNTS = {1: "a", 2: "two", 3: "three"}
RELATIONS = ["above", "below", "to the left of", "to the right of"]
SHAPE_ID = {s: i for i, s in enumerate(SHAPES)}


def _a(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def group_caption(n, color, shape, bg):
    head = _a(color) if n == 1 else f"{COUNTS[n]} {color}"
    return f"{head} {shape}{'s' if n > 1 else ''} on {_a(bg)} background"


def pair_caption(c1, s1, rel, c2, s2, bg):
    return f"{_a(c1)} {s1} {rel} {_a(c2)} {s2} on {_a(bg)} background"


def held_out(caption):
    return hashlib.md5(caption.encode()).digest()[0] % 10 == 0


def random_scene(rng):
    """A scene description: dict(kind, caption, bg, objects=[(color, shape, cx, cy, r)], ...)."""
    if rng.random() < 0.5:
        n = int(rng.integers(1, 4))
        color, shape = COLOR_NAMES[rng.integers(8)], SHAPES[rng.integers(3)]
        bg = rng.choice([c for c in COLOR_NAMES if c != color])
        return {"kind": "group", "n": n, "color": color, "shape": shape, "bg": bg,
                "caption": group_caption(n, color, shape, bg)}
    while True:
        c1, c2 = COLOR_NAMES[rng.integers(8)], COLOR_NAMES[rng.integers(8)]
        s1, s2 = SHAPES[rng.integers(3)], SHAPES[rng.integers(3)]
        if (c1, s1) != (c2, s2):
            break
    rel = RELATIONS[rng.integers(4)]
    bg = rng.choice([c for c in COLOR_NAMES if c not in (c1, c2)])
    return {"kind": "pair", "c1": c1, "s1": s1, "rel": rel, "c2": c2, "s2": s2, "bg": bg,
            "caption": pair_caption(c1, s1, rel, c2, s2, bg)}


def random_training_scene(rng):
    while True:
        s = random_scene(rng)
        if not held_out(s["caption"]):
            return s


def _separated(objs, cx, cy, r, gap):
    return all(max(abs(cx - ox), abs(cy - oy)) > r + orr + gap for (_, _, ox, oy, orr) in objs)


def layout(scene, rng):
    """Places the scene's objects: a list of (color, shape, cx, cy, r) in pixels, r = half size."""
    m = 4
    if scene["kind"] == "group":
        while True:
            objs = []
            for _ in range(scene["n"]):
                for _attempt in range(50):
                    r = float(rng.uniform(10, 19))
                    cx, cy = rng.uniform(r + m, SIZE - r - m, size=2)
                    if _separated(objs, cx, cy, r, 8):
                        objs.append((scene["color"], scene["shape"], float(cx), float(cy), r))
                        break
            if len(objs) == scene["n"]:
                return objs
    # pair: the first object on the named side of the second, roughly aligned on the other axis
    while True:
        r1, r2 = rng.uniform(11, 22, size=2)
        a = rng.uniform(r1 + m, SIZE - r1 - m)  # along the other axis
        b = a + rng.uniform(-12, 12)
        b = min(max(b, r2 + m), SIZE - r2 - m)
        p1 = rng.uniform(r1 + m, SIZE - r1 - m)
        p2 = rng.uniform(r2 + m, SIZE - r2 - m)
        lo, hi = (p1, p2) if p1 < p2 else (p2, p1)
        if hi - lo < r1 + r2 + 10:
            continue
        rel = scene["rel"]
        first_low = rel in ("above", "to the left of")  # first object at the smaller coordinate
        q1, q2 = (lo, hi) if first_low else (hi, lo)
        if rel in ("above", "below"):
            o1, o2 = (float(a), float(q1), float(r1)), (float(b), float(q2), float(r2))
        else:
            o1, o2 = (float(q1), float(a), float(r1)), (float(q2), float(b), float(r2))
        return [(scene["c1"], scene["s1"], *o1), (scene["c2"], scene["s2"], *o2)]


OUTLINE = 3.0  # the outlined style's line width in pixels


def render(batch, device, style="filled"):
    """batch: list of (bg, objects) -> float tensor [B, 3, SIZE, SIZE] in [-1, 1], anti-aliased.
    style "outlined": each shape drawn as its outline (OUTLINE pixels wide, inside its edge), the
    background showing through (the LoRA of lora.py learns it)."""
    B = len(batch)
    K = max(len(o) for _, o in batch)
    par = torch.zeros(B, K, 4)           # cx, cy, r, shape id
    col = torch.zeros(B, K + 1, 3)       # background then objects
    present = torch.zeros(B, K)
    for i, (bg, objs) in enumerate(batch):
        col[i, 0] = torch.tensor(COLORS[bg], dtype=torch.float32)
        for k, (c, s, cx, cy, r) in enumerate(objs):
            par[i, k] = torch.tensor([cx, cy, r, SHAPE_ID[s]])
            col[i, k + 1] = torch.tensor(COLORS[c], dtype=torch.float32)
            present[i, k] = 1
    par, col, present = par.to(device), col.to(device) / 127.5 - 1, present.to(device)
    g = torch.arange(SIZE, device=device, dtype=torch.float32) + 0.5
    y, x = g[:, None], g[None, :]
    cx, cy, r, sid = (par[..., j][..., None, None] for j in range(4))
    dx, dy = x - cx, y - cy
    d_circle = torch.sqrt(dx * dx + dy * dy) - r
    d_square = torch.maximum(dx.abs(), dy.abs()) - r
    # upward triangle with apex (cx, cy - r) and base y = cy + r from cx - r to cx + r
    k = 1.0 / math.sqrt(5.0)
    d_tri = torch.maximum(dy - r, (2 * dx.abs() - (dy + r)) * k)
    d = torch.where(sid == 0, d_circle, torch.where(sid == 1, d_square, d_tri))
    cover = (0.5 - d).clamp(0, 1) * present[..., None, None]  # [B, K, H, W]
    if style == "outlined":
        cover = cover - (0.5 - d - OUTLINE).clamp(0, 1) * present[..., None, None]
    img = col[:, 0, :, None, None].expand(B, 3, SIZE, SIZE).clone()
    for j in range(K):
        a = cover[:, j : j + 1]
        img = img * (1 - a) + col[:, j + 1, :, None, None] * a
    return img


# ---------------------------------------------------------------------------------------------
# scoring a generated image (uint8 [H, W, 3]) against its scene description

_PAL = np.array([COLORS[c] for c in COLOR_NAMES], dtype=np.float32)


def nearest_color(rgb):
    return COLOR_NAMES[int(np.argmin(((_PAL - np.asarray(rgb, np.float32)) ** 2).sum(-1)))]


def _components(mask):
    """4-connected components of a bool mask: list of (ys, xs) index arrays."""
    H, W = mask.shape
    seen = np.zeros_like(mask)
    comps = []
    for sy, sx in zip(*np.nonzero(mask)):
        if seen[sy, sx]:
            continue
        stack, ys, xs = [(sy, sx)], [], []
        seen[sy, sx] = True
        while stack:
            py, px = stack.pop()
            ys.append(py)
            xs.append(px)
            for ny, nx in ((py - 1, px), (py + 1, px), (py, px - 1), (py, px + 1)):
                if 0 <= ny < H and 0 <= nx < W and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
        comps.append((np.array(ys), np.array(xs)))
    return comps


def blobs(img):
    """Background color name and the shapes found: list of dict(color, shape, cx, cy, area)."""
    img = img.astype(np.float32)
    border = np.concatenate([img[:2].reshape(-1, 3), img[-2:].reshape(-1, 3), img[:, :2].reshape(-1, 3),
                             img[:, -2:].reshape(-1, 3)])
    bg_rgb = np.median(border, axis=0)
    mask = np.sqrt(((img - bg_rgb) ** 2).sum(-1)) > 60
    out = []
    for ys, xs in _components(mask):
        area = len(ys)
        if area < 40:
            continue
        h, w = ys.max() - ys.min() + 1, xs.max() - xs.min() + 1
        fill = area / float(h * w)
        shape = "square" if fill > 0.89 else ("circle" if fill > 0.64 else "triangle")
        out.append({"color": nearest_color(np.median(img[ys, xs], axis=0)), "shape": shape,
                    "cx": float(xs.mean()), "cy": float(ys.mean()), "area": area, "fill": fill})
    return nearest_color(bg_rgb), out


def score(scene, img):
    """-> dict(color=bool, shape=bool, count=bool): color: background and the named colors (in the
    named places, for pairs) are right; shape: the right number of shapes, each of the named kind
    (in the named places); count: the right number of shapes."""
    bg, found = blobs(img)
    if scene["kind"] == "group":
        n = len(found)
        colors_ok = n > 0 and all(b["color"] == scene["color"] for b in found)
        return {"color": bg == scene["bg"] and colors_ok, "count": n == scene["n"],
                "shape": n == scene["n"] and all(b["shape"] == scene["shape"] for b in found)}
    n_ok = len(found) == 2
    if len(found) > 2:  # colors can still be judged: the two largest shapes, in the named order
        found = sorted(found, key=lambda b: -b["area"])[:2]
    if len(found) < 2:
        return {"color": False, "shape": False, "count": False}
    rel = scene["rel"]
    key = "cy" if rel in ("above", "below") else "cx"
    a, b = sorted(found, key=lambda o: o[key])
    first, second = (a, b) if rel in ("above", "to the left of") else (b, a)
    return {"color": bg == scene["bg"] and first["color"] == scene["c1"] and second["color"] == scene["c2"],
            "count": n_ok,
            "shape": n_ok and first["shape"] == scene["s1"] and second["shape"] == scene["s2"]}


def hollow(img):
    """The share of the shapes found whose middle shows the background (outlined, not filled),
    and how many shapes were found."""
    img = img.astype(np.float32)
    border = np.concatenate([img[:2].reshape(-1, 3), img[-2:].reshape(-1, 3), img[:, :2].reshape(-1, 3),
                             img[:, -2:].reshape(-1, 3)])
    bg_rgb = np.median(border, axis=0)
    mask = np.sqrt(((img - bg_rgb) ** 2).sum(-1)) > 60
    n = h = 0
    for ys, xs in _components(mask):
        if len(ys) < 40:
            continue
        cy, cx = int(round((ys.min() + ys.max()) / 2)), int(round((xs.min() + xs.max()) / 2))
        n += 1
        h += bool(np.sqrt(((img[cy, cx] - bg_rgb) ** 2).sum()) < 60)
    return (h / n if n else 0.0), n


def held_out_scenes(n_group=50, n_pair=50, seed=1234):
    """The evaluation prompts: held-out captions of both kinds, in a fixed order."""
    groups = [dict(kind="group", n=n, color=c, shape=s, bg=bg, caption=group_caption(n, c, s, bg))
              for n in (1, 2, 3) for c in COLOR_NAMES for s in SHAPES for bg in COLOR_NAMES if bg != c]
    groups = [g for g in groups if held_out(g["caption"])]
    rng = np.random.default_rng(seed)
    rng.shuffle(groups)
    pairs, seen = [], set()
    while len(pairs) < n_pair:
        s = random_scene(rng)
        if s["kind"] == "pair" and held_out(s["caption"]) and s["caption"] not in seen:
            seen.add(s["caption"])
            pairs.append(s)
    return groups[:n_group] + pairs
