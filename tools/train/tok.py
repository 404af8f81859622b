"""A small byte-level BPE tokenizer in the format of Qwen's tokenizer.json (same normalizer,
pre-tokenizer regex, byte-level alphabet, chat tokens), trained on the caption corpus, so the
model folder loads in ditrun and in transformers exactly like a real Qwen3 tokenizer while its
vocabulary stays a few hundred entries.

encode() is a plain Python implementation used for training; it handles ASCII text (all the
captions are ASCII), where the regex below splits exactly like Qwen's Unicode one."""
import collections
import json
import re

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
# the same pattern with \p{L} -> [A-Za-z], \p{N} -> [0-9]: identical splits on ASCII text
_ASCII_SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+[\r\n]*|"
                          r"\s*[\r\n]+|\s+(?!\S)|\s+")
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}")


def chat(prompt):
    """The ZImagePipeline prompt: Qwen3's chat template, thinking style, generation prompt added."""
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def bytes_to_unicode():
    """The GPT-2 byte-level alphabet: byte -> printable character."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_B2U = bytes_to_unicode()


def _pieces(text):
    """Pre-tokenized byte-level pieces of text without special tokens."""
    assert all(ord(ch) < 128 for ch in text), "the training tokenizer handles ASCII text only"
    return ["".join(_B2U[b] for b in m.group(0).encode()) for m in _ASCII_SPLIT.finditer(text)]


class Tokenizer:
    def __init__(self, vocab, merges):
        self.vocab, self.merges = vocab, merges
        self.ranks = {tuple(m): i for i, m in enumerate(merges)}
        base = max(vocab.values()) + 1
        self.special = {s: base + i for i, s in enumerate(SPECIALS)}
        self.cache = {}

    @property
    def n_ids(self):
        return max(self.special.values()) + 1

    def _bpe(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        parts = list(piece)
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: self.ranks.get((parts[i], parts[i + 1]), 1 << 30))
            if (parts[best], parts[best + 1]) not in self.ranks:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        ids = [self.vocab[p] for p in parts]
        self.cache[piece] = ids
        return ids

    def encode(self, text):
        ids = []
        for chunk in _SPECIAL_RE.split(text):
            if chunk in self.special:
                ids.append(self.special[chunk])
            elif chunk:
                for p in _pieces(chunk):
                    ids.extend(self._bpe(p))
        return ids

    def save(self, folder, model_max_length=512):
        added = [{"id": self.special[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": True} for s in SPECIALS]
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
        tj = {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False},
                byte_level]},
            "post_processor": byte_level, "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": self.vocab, "merges": [list(m) for m in self.merges]},
        }
        with open(f"{folder}/tokenizer.json", "w") as f:
            json.dump(tj, f, ensure_ascii=False, indent=1)
        cfg = {
            "add_bos_token": False, "add_prefix_space": False,
            "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
            "bos_token": None, "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
            "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": model_max_length,
            "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
            "unk_token": None,
        }
        with open(f"{folder}/tokenizer_config.json", "w") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=1)


def load(folder):
    """The Tokenizer that save() wrote to folder (same vocabulary, merges and special ids)."""
    with open(f"{folder}/tokenizer.json") as f:
        tj = json.load(f)
    tk = Tokenizer(tj["model"]["vocab"], [tuple(m) for m in tj["model"]["merges"]])
    assert {a["content"]: a["id"] for a in tj["added_tokens"]} == tk.special, "special token ids differ"
    return tk


def train(texts, max_merges=4000):
    """Byte-level BPE on texts (special tokens are split off first): merges the most frequent
    adjacent pair until every piece of the corpus is one token or max_merges is reached."""
    freq = collections.Counter()
    for t in texts:
        for chunk in _SPECIAL_RE.split(t):
            if chunk and chunk not in SPECIALS:
                freq.update(_pieces(chunk))
    words = {w: list(w) for w in freq}
    vocab = {_B2U[b]: i for i, b in enumerate(sorted(_B2U))}
    merges = []
    while len(merges) < max_merges:
        pairs = collections.Counter()
        for w, parts in words.items():
            for a, b in zip(parts, parts[1:]):
                pairs[(a, b)] += freq[w]
        if not pairs:
            break
        # most frequent; ties broken by the pair itself, so training is deterministic
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
        for w, parts in words.items():
            i, out = 0, []
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            words[w] = out
    return Tokenizer(vocab, merges)
