"""Strings that a tokenizer must split exactly as llama.cpp does, grouped by what they exercise.

`corpus()` returns every string once, in a fixed order; `SPECIAL_TEXTS` are the ones that contain a
model's special tokens written as text (tokenized with special=True and special=False).
"""

from __future__ import annotations

SCRIPTS = [
    "日本語のテキストを分割します。",
    "東京は日本の首都です",
    "中文分词测试：你好，世界！",
    "繁體中文與简体中文混合",
    "カタカナとひらがなと漢字",
    "ｶﾀｶﾅ 半角",
    "مرحبا بالعالم",
    "اللغة العربية جميلة جدا، أليس كذلك؟",
    "العدد ١٢٣٤٥ بالأرقام العربية",
    "नमस्ते दुनिया",
    "हिन्दी में लिखा गया वाक्य।",
    "Привет, мир!",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ελληνικά γράμματα: αβγδε ΑΒΓΔΕ",
    "Καλημέρα κόσμε",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "สวัสดีครับ",
    "한국어 텍스트입니다",
    "안녕하세요, 세계!",
    "עברית נכתבת מימין לשמאל",
    "Tiếng Việt có dấu: Đường phố Hà Nội",
    "Türkçe: çğıöşü ÇĞİÖŞÜ",
    "Polski: zażółć gęślą jaźń",
    "Deutsch: Größe, Straße, Übermaß",
    "Français : œuvre, naïve, garçon, à côté",
    "Español: ¿Qué tal? ¡Muy bien!",
    "Português: ação, coração, pão",
    "ქართული ენა",
    "Հայերեն լեզու",
    "தமிழ் மொழி",
    "বাংলা ভাষা",
    "ગુજરાતી",
    "ᚠᚢᚦᚨᚱᚲ runes",
    "e\u0301 combining acute vs é precomposed",
    "Zalgo: Z\u0351\u0352a\u0353\u0354l\u0355g\u0356o",
    "mixed 日本 and English and العربية",
]

EMOJI = [
    "🦙",
    "🦙🦙🦙",
    "I love 🍕 and 🍣!",
    "👍🏽 thumbs up with skin tone",
    "👨‍👩‍👧‍👦 family ZWJ",
    "👩‍💻 technologist",
    "🏳️‍🌈 rainbow flag",
    "🧑🏿‍🚀 astronaut",
    "❤️ heart with VS16",
    "🇯🇵🇺🇸 flags",
    "😀😃😄😁😆😅😂🤣",
    "emoji at end 🎉",
    "🫨🪿🫎 newer emoji",
    "a🦙b",
    "✅ ❌ ⚠️",
    "😀\n😀",
]

# Characters rare enough that SentencePiece vocabularies fall back to <0xNN> byte tokens.
RARE = [
    "𓀀𓀁 hieroglyphs",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 fraktur",
    "𐍈 gothic",
    "ꙮ multiocular o",
    "\U0010fffd plane 16",
    "\ue000 private use",
    "x\U0001d11ey clef between letters",
]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "class Foo(Bar):\n    def __init__(self):\n        super().__init__()\n",
    "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    '#include <stdio.h>\nint main(void) { printf("hi\\n"); return 0; }',
    'fn main() {\n    let v: Vec<u8> = vec![1, 2, 3];\n    println!("{:?}", v);\n}',
    "const f = async (x) => { await g(x); return x?.y ?? 0; };",
    'package main\n\nfunc main() {\n\tfmt.Println("hello")\n}',
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    '<div class="box"><span>text</span></div>',
    '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b"}}',
    "x <<= 2; y >>= 3; z **= 4; w //= 5",
    "if x != y && z == w || !v { return; }",
    "#!/bin/bash\nset -euo pipefail\necho \"$HOME\" | grep -v '^#'",
    "public static void main(String[] args) throws Exception {}",
    "λx. x + 1  -- lambda",
    "a_b_c = snake_case; aBC = camelCase; ABC_DEF = CONSTANT",
    "regex = r'^\\d{3}-\\d{4}$'",
    "    indented four\n        indented eight\n\t\ttabbed two",
    "// comment\n/* block\n   comment */",
    "<?php echo $var; ?>",
    "```python\nprint('fenced')\n```",
    "| col1 | col2 |\n|------|------|\n| a    | b    |",
    "$ pip install -e '.[test]'",
]

WHITESPACE = [
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\n\n\n\n\n\n\n\n\n\n",
    "\r\n",
    "\r\n\r\n",
    " \n ",
    "\t\n\t",
    "word  word",
    "word   word",
    "word\tword",
    "word \tword",
    "word\t word",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "\ttab first",
    "line one\nline two\n\nline four",
    "a\n\n\n\nb",
    "\u00a0non-breaking\u00a0space",
    "\u3000ideographic space",
    "zero\u200bwidth\u200bspace",
    "\u2028line separator",
    "mixed \t \n \r\n end",
]

NUMBERS = [
    "0",
    "7",
    "42",
    "123",
    "1234",
    "12345",
    "1234567890",
    "3.14159",
    "-273.15",
    "1e-10",
    "6.022e23",
    "1,000,000",
    "1.000.000,50",
    "0x1F 0b1010 0o777",
    "v1.2.3-rc4",
    "2026-12-02T17:07:41Z",
    "(555) 123-4567",
    "IPv4 192.168.0.1",
    "50% of 200 is 100",
    "$19.99 €5 £3 ¥1000",
    "¼ ½ ¾ ² ³",
    "١٢٣ ۴۵۶ ७८९",
    "Ⅻ roman numeral",
    "a1b2c3",
    "1st 2nd 3rd 4th",
]

PUNCTUATION = [
    "Hello, world!",
    "Wait... what?!",
    "“Smart quotes” and ‘single’ ones",
    "em—dash and en–dash",
    "«guillemets» and „low quotes“",
    "(parentheses) [brackets] {braces} <angles>",
    "a/b\\c|d",
    "@user #hashtag $money %percent ^caret &amp *star",
    "~tilde `backtick`",
    "!!!???...,,,;;;:::",
    "---===+++___",
    "email@example.com and https://example.org/path?q=1&r=2#frag",
    "¿¡ inverted !?",
    "…ellipsis character",
    "。、「」『』",
    "•bullet • point",
    "§ ¶ † ‡ © ® ™",
    "→ ← ↑ ↓ ⇒",
    "∀x∈ℝ: x² ≥ 0",
    "a+b=c; x<y>z",
]

CONTRACTIONS = [
    "I'm here",
    "you're there",
    "they've gone",
    "she'll come",
    "he'd know",
    "it's fine",
    "don't won't can't shouldn't",
    "I'M SHOUTING",
    "YOU'RE LOUD",
    "They'Ve MiXeD",
    "rock 'n' roll",
    "'quoted'",
    "o'clock",
    "the dogs' bowls",
    "y'all'd've",
]

MISC = [
    "Hello world",
    "hello world",
    "HELLO WORLD",
    "Hello",
    " Hello",
    "The quick brown fox jumps over the lazy dog.",
    "supercalifragilisticexpialidocious",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "a",
    "ab",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "abababababababababab",
    "Mixed CASE WoRdS",
    "tokenization_is-hard.really",
    "naïve café résumé",
    "ß ẞ ﬁ ﬂ ligatures",
    "\x00null\x01control\x7fdel",
    "tab\tseparated\tvalues",
    "<unk>",
    "< s >",
    "<|fake|>",
    "<0x41>",
    "▁already▁escaped",
    "Ġbyte-level Ċ look",
]

# Texts containing the bundled models' special tokens, tokenized both with and without special parsing.
SPECIAL_TEXTS = [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>",
    "text<|im_end|>text",
    "<|endoftext|>",
    "a <|endoftext|> b",
    "<|im_start|><|im_end|>",
    "<|im_end|><|im_end|>",
    " <|im_start|> spaced <|im_end|> ",
    "<repo_name>lexi<file_sep>main.py",
    "<jupyter_code>print(1)<jupyter_output>1",
    "<bos>Hello",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\n日本語<end_of_turn>",
    "<end_of_turn><eos>",
    "before<pad>after",
    "<start_of_image>an image<end_of_image>",
    "<unused0><unused1>",
    "<mask> token",
    "[multimodal]",
    "<eos>",
    "<start_of_turn> leading space",
    "x<start_of_turn>y",
]


def _generated() -> list[str]:
    """Systematic variants: whitespace runs of every length, digit runs, and scripts joined to code."""
    out = []
    for n in range(1, 9):
        out.append("x" + " " * n + "y")
        out.append("x" + "\t" * n + "y")
        out.append("x" + "\n" * n + "y")
    for n in (1, 2, 3, 4, 5, 6, 7, 9, 13):
        out.append("9" * n)
        out.append("a" + "1" * n + " " + "2" * n)
    out.append(" ".join(SCRIPTS[:6]))
    out.append("\n".join(CODE[:3]))
    out.append(" ".join(EMOJI[:5]))
    return out


def corpus() -> list[str]:
    seen: dict[str, None] = {}
    for group in (SCRIPTS, RARE, EMOJI, CODE, WHITESPACE, NUMBERS, PUNCTUATION, CONTRACTIONS, MISC, SPECIAL_TEXTS):
        for text in group:
            seen.setdefault(text, None)
    for text in _generated():
        seen.setdefault(text, None)
    return list(seen)
