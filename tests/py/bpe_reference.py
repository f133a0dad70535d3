#!/usr/bin/env python3
"""The reference for tests/test_bpe.cpp: the `tokenizers` package (Hugging Face).

    bpe_reference.py train CORPUS VOCAB OUT [quick]   trains a GPT-2 style
        byte-level BPE on CORPUS and writes OUT/tokenizer.json; unless quick,
        also OUT/corpus_ids.bin (the whole corpus encoded as one string, int32
        little-endian) and OUT/cases.json (varied Unicode strings and their
        ids), checking decode(encode(text)) == text.
"""
import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def cases():
    rnd = random.Random(20240520)
    pieces = ["Hello", " world", "  ", "\n", "\n\n", "\t", " \n ", "'s", "'S", "'ll", "'re", "'ve", "'m", "'d",
              "'t", "''", " '", "don't", "123", " 4567", "\u0663\u0664", "\u216b", "\u00bd", "\u00b2",
              "\u00f1and\u00fa", "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac", "\u0420\u0443\u0441\u0441\u043a\u0438\u0439",
              "\u4e2d\u6587", "\u65e5\u672c\u8a9e", "\ud55c\uad6d\uc5b4", "\U0001f600\U0001f389", " \U0001f600",
              "a\u00a0b", "\u2003", "\u3000", "\u2028", "\u0085", "!!!", " ?!", "--", "...", "$%", "\u200b",
              "e\u0301", "\ufb01", "\u01c5", "\u02b0", "\u0000", "\x1b[31m", "x\r\ny", "<|endoftext|>",
              " <|endoftext|>x", "And God said"]
    out = ["", " ", "a", "<|endoftext|>"]
    for _ in range(300):
        s = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 25)))
        for _ in range(rnd.randint(0, 6)):
            cp = rnd.choice([rnd.randint(0x20, 0x7E), rnd.randint(0xA0, 0x2FFF), rnd.randint(0x3000, 0xD7FF),
                             rnd.randint(0xE000, 0xFFFD), rnd.randint(0x10000, 0x2FFFF)])
            s += chr(cp)
        out.append(s)
    return out


def main():
    if sys.argv[1] != "train":
        raise SystemExit(__doc__)
    corpus, vocab, out = sys.argv[2], int(sys.argv[3]), sys.argv[4]
    os.makedirs(out, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train([corpus], trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    if len(sys.argv) > 5 and sys.argv[5] == "quick":
        return
    text = open(corpus, encoding="utf-8").read()
    ids = tok.encode(text).ids
    assert tok.decode(ids, skip_special_tokens=False) == text
    import array
    a = array.array("i", ids)
    if sys.byteorder != "little":
        a.byteswap()
    with open(os.path.join(out, "corpus_ids.bin"), "wb") as f:
        a.tofile(f)
    cs = []
    for s in cases():
        e = tok.encode(s).ids
        cs.append({"text": s, "ids": e, "decoded": tok.decode(e, skip_special_tokens=False)})
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cs, f, ensure_ascii=True)
    print(f"trained vocab {tok.get_vocab_size()}, corpus {len(ids)} tokens, {len(cs)} cases")


if __name__ == "__main__":
    main()
