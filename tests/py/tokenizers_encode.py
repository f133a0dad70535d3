#!/usr/bin/env python3
"""The live reference of tests/test_tokenizers.cpp: the `tokenizers` package.

    tokenizers_encode.py TOKENIZER_JSON CASES_JSON OUT_JSON CORPUS OUT_BIN

encodes every string of CASES_JSON's "texts" with TOKENIZER_JSON
(encode(text, add_special_tokens=False)) into OUT_JSON ({"ids": [...],
"decoded": [...]}), and the whole CORPUS file as one string into OUT_BIN
(int32 little-endian), and what that decodes to into OUT_BIN.txt (the corpus,
normalized where the tokenizer normalizes).
"""
import array
import json
import sys

from tokenizers import Tokenizer


def main():
    if len(sys.argv) != 6:
        raise SystemExit(__doc__)
    tok = Tokenizer.from_file(sys.argv[1])
    texts = json.load(open(sys.argv[2], encoding="utf-8"))["texts"]
    ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        json.dump({"ids": ids, "decoded": [tok.decode(e, skip_special_tokens=False) for e in ids]}, f, ensure_ascii=True)
    corpus = open(sys.argv[4], encoding="utf-8", newline="").read()
    a = array.array("i", tok.encode(corpus, add_special_tokens=False).ids)
    decoded = tok.decode(a.tolist(), skip_special_tokens=False)
    assert decoded == (tok.normalizer.normalize_str(corpus) if tok.normalizer else corpus)
    with open(sys.argv[5] + ".txt", "w", encoding="utf-8", newline="") as f:
        f.write(decoded)
    if sys.byteorder != "little":
        a.byteswap()
    with open(sys.argv[5], "wb") as f:
        a.tofile(f)


if __name__ == "__main__":
    main()
