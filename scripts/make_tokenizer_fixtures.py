#!/usr/bin/env python3
"""Writes the tokenizer fixtures of tests/test_tokenizers.cpp with the `tokenizers`
package (Hugging Face): small byte-level BPE models trained on the shipped corpus
plus a page of many-script text, each with its family's exact normalizer,
pre-tokenizer, decoder, post-processor and special tokens:

    llama3   Split(Llama 3's regex, Isolated) + ByteLevel(use_regex=False), ignore_merges,
             <|begin_of_text|> ... added after the vocabulary, a BOS TemplateProcessing
    qwen2    NFC, Split(Qwen2's regex, Isolated) + ByteLevel(use_regex=False),
             <|endoftext|> <|im_start|> <|im_end|> added after the vocabulary
    smollm2  Digits(individual_digits) + ByteLevel(use_regex=True),
             <|endoftext|> <|im_start|> <|im_end|> ... as ids 0.. (trained in)

into tests/data/tokenizers/NAME/tokenizer.json, and tests/data/tokenizers/cases.json:
varied strings and, for each family, the ids `tokenizers` gives them
(encode(text, add_special_tokens=False)) and the decoded text. Run from the
repository root:

    python3 scripts/make_tokenizer_fixtures.py
"""
import json
import os
import random

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")
OUT = "tests/data/tokenizers"
VOCAB = 1000

# Many scripts, marks, numbers, emoji: in the training text so that merges cross multi-byte characters.
WORLD = ("Ελληνικά και Русский язык, 中文 日本語のテキスト 한국어 문장. हिन्दी में लिखा पाठ। العربية ١٢٣٤ "
         "עברית ไทยภาษา Ⅻ ½ ² ³ ١٢٣ ๑๒๓ ०१२३ café naïve e\u0301 A\u030a ﬁ ǅ ʰ 😀🎉 👩‍👩‍👧 🇫🇷 "
         "DON'T I'M YOU'RE WE'VE SHE'LL HE'D IT'S don't i'm you're 12345678 3.14159 1,000,000\n")


def cases():
    rnd = random.Random(20240521)
    pieces = ["Hello", " world", "  ", "   ", "\n", "\n\n", "\r\n", "\r", "\t", " \n ", "\n  \n", " \t\n",
              "'s", "'S", "'ll", "'LL", "'Ll", "'re", "'RE", "'ve", "'Ve", "'m", "'M", "'d", "'D", "'t", "'T",
              "'\u017f", "''", " '", "don't", "DON'T", "I'M", "You'Re", "1", "12", "123", "1234", " 4567",
              "1234567890", "\u0663\u0664\u0665\u0666", "\u0967\u0968", "\u216b", "\u00bd", "\u00b2", "\u2460",
              "\u00f1and\u00fa", "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
              "\u0420\u0443\u0441\u0441\u043a\u0438\u0439", "\u4e2d\u6587", "\u65e5\u672c\u8a9e",
              "\ud55c\uad6d\uc5b4", "\u0939\u093f\u0928\u094d\u0926\u0940", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
              "\u0e44\u0e17\u0e22", "\U0001f600\U0001f389", " \U0001f600", "\U0001f469\u200d\U0001f469\u200d\U0001f467",
              "\U0001f1eb\U0001f1f7", "a\u00a0b", "\u2003", "\u3000", "\u2028", "\u0085", "\x1c\x1d\x1e\x1f", "\x0b\x0c",
              "!!!", " ?!", "--", "...", "$%", " (x)", "\u200b", "e\u0301", "A\u030a", "\u0301x", "\u1100\u1161\u11a8",
              "\ufb01", "\u01c5", "\u02b0", "\u0000", "\x1b[31m", "x\r\ny", "And God said", " And", "\u212b", "\u2126",
              "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>",
              "<|reserved_special_token_0|>", "<|im_start", "<|", "|>"]
    out = ["", " ", "a", "\n", "  \n\n  ", "<|endoftext|>", "<|begin_of_text|>Hello", WORLD,
           "<|im_start|>user\nWhat's 1234+56?<|im_end|>\n<|im_start|>assistant\n",
           "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
           "x'\u017fa it'Sa WE'LLb you'REx I'Ma 'Dz", "a\x1c\x1db \x0b\x0cc", "12 1234 1234567 \u0661\u0662\u0663\u0664",
           "   \n\n   x \r\n\r\n  y\t\t\n", "e\u0301\u0323 q\u0307\u0323 \u212b \u1100\u1161\u11a8 \uac00\u11a8",
           "x<|im_start|><|im_start|>y<|im_end|>", "<|reserved_special_token_0|><|reserved_special_token_1|>"]
    for _ in range(240):
        s = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 25)))
        for _ in range(rnd.randint(0, 6)):
            cp = rnd.choice([rnd.randint(0x20, 0x7E), rnd.randint(0xA0, 0x2FFF), rnd.randint(0x3000, 0xD7FF),
                             rnd.randint(0xE000, 0xFFFD), rnd.randint(0x10000, 0x2FFFF)])
            s += chr(cp)
        out.append(s)
    return out


def train(tok, special_first, special_after):
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=special_first, show_progress=False)
    corpus = open("data/kjv.txt", encoding="utf-8").read()[:400000]
    tok.train_from_iterator([corpus, WORLD * 20], trainer)
    if special_after:
        tok.add_special_tokens(special_after)
    tok.decoder = decoders.ByteLevel()
    return tok


def llama3():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    special = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
               "<|reserved_special_token_1|>", "<|start_header_id|>", "<|end_header_id|>",
               "<|reserved_special_token_2|>", "<|eot_id|>"]
    train(tok, [], special)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def qwen2():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    train(tok, [], ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def smollm2():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    train(tok, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>",
                "<filename>"], [])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def main():
    texts = cases()
    golden = {"texts": texts, "ids": {}, "decoded": {}}
    for name, make in [("llama3", llama3), ("qwen2", qwen2), ("smollm2", smollm2)]:
        tok = make()
        os.makedirs(f"{OUT}/{name}", exist_ok=True)
        tok.save(f"{OUT}/{name}/tokenizer.json", pretty=False)
        ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        golden["ids"][name] = ids
        golden["decoded"][name] = [tok.decode(e, skip_special_tokens=False) for e in ids]
        print(f"{name}: vocab {tok.get_vocab_size()}, {sum(map(len, ids))} ids over {len(texts)} cases")
    with open(f"{OUT}/cases.json", "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=True, separators=(",", ":"))


if __name__ == "__main__":
    main()
