#!/usr/bin/env python3
"""Prints a JSON array of hard tokenizer test strings (fixed list + seeded random mixes) to stdout.
Used by make_golden.sh (GPT-2 / npm reference) and hf_compare.py (HF tokenizers reference)."""
import json
import random

FIXED = [
    "", " ", "  ", "a", " a", "Hello world", "Hello, world!", "hello\nworld", "\n", "\n\n", "\n\n\n\n",
    "\r\n", "a\r\nb\r\n\r\nc", "\t", "\t\tindented", "trailing spaces   ", "   leading", "a  b   c    d",
    " " * 100, "x" + " " * 37 + "y", "\n \n  \n   \n", " \t \n \r ",
    "I'm you're we've they'll he'd it's don't can't won't isn't", "I'M YOU'RE WE'VE THEY'LL HE'D IT'S",
    "'s 't 're 've 'm 'll 'd", "''quoted'' ``quotes''", "rock'n'roll o'clock", "’s curly apostrophe’s",
    "0", "1234567890", "3.14159265358979", "1,000,000", "1 000 000", "2024-05-20", "v1.2.3-beta+exp.sha",
    "12abc34def", "x1y2z3", "٣٤٥ Arabic-Indic digits", "①②③ circled", "Ⅻ roman numeral", "½ ¾ fractions",
    "0x7fffffff 0b1010 1e-9 -42 +7", "$100.00 €50 £3 ¥1000", "100%", "#1 @user",
    "😀", "👍🏽", "👨‍👩‍👧‍👦 family", "🇩🇪🇯🇵 flags", "emoji😀in😀text", "❤️ ✔︎ ☺",
    "日本語のテキスト", "中文字符测试，标点。", "한국어 텍스트", "Привет, мир!", "Γειά σου Κόσμε",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "ქართული", "Tiếng Việt có dấu",
    "mixed: abcДЕФ中文123😀!", "café naïve résumé", "e\u0301 combining", "Z\u0351\u0352\u0353algo",
    "nbsp\u00a0here", "ideographic\u3000space", "bom\ufeffinside", "nel\u0085char", "zw\u200bsp",
    "line\u2028sep\u2029para", "thin\u2009space\u202fnarrow", "\u00a0\u00a0 a", "a \u00a0b",
    "<|endoftext|>", "text<|endoftext|>more", "<|endoftext", "def f(x):\n    return x**2  # square\n",
    "for (int i = 0; i < n; i++) { a[i] += b[i]; }", "https://example.com/path?q=1&r=2#frag",
    "user@example.com", "C:\\Windows\\System32", "!!!!!!!!!!", "?!?!...---", "((()))[[]]{{}}",
    "a" * 300, "ab" * 150, "=" * 80, "-" * 200, ",,,,,,,,", ",.,.,.", "Ġ Ċ ĉ (byte-level chars)",
    "\x01\x02 control (NUL is tested by the C round trips) \x1b[31mred\x1b[0m", "\x7f\x80\x9f C1?", "ÿþý", "a\u0300\u0301\u0302",
    "𝕳𝖊𝖑𝖑𝖔 math", "𐍈 gothic", "\U0001F9D1\u200d\U0001F4BB", "ℌ℮ℓℓ◎",
]


def rand_strings(n, seed=1234):
    rng = random.Random(seed)
    pools = [" ", "  ", "\n", "\t", "'", "'s", "'ll", "0", "7", "42", "a", "Z", "the", "The", " the", ",", ".", "!",
             "é", "ß", "日", "本", "😀", "👍🏽", "\u00a0", "\u3000", "д", "ж", "١", "½", "-", "_", "/", "\\", "\"",
             "\r\n", "x9", "ing", "tion", "\u200b", "\ufeff", "\u0085", "\u2028", "\u0301", "ก", "्", "क"]
    out = []
    for _ in range(n):
        k = rng.randint(1, 24)
        out.append("".join(rng.choice(pools) for _ in range(k)))
    return out


if __name__ == "__main__":
    print(json.dumps(FIXED + rand_strings(400), ensure_ascii=True))
