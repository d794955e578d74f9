#!/usr/bin/env python3
"""Writes texts.json: the test texts whose encodings gen_reference.py computes
with HF tokenizers. Run here (no dependencies); the output is committed."""
import json

def excerpt(path, n):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(n)
    except OSError:
        return None

texts = [
    "Hello, world!",
    "def fib(n):\n    # naive\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "func main() {\n\tfmt.Println(\"hi\")\n\tfor i := 0; i < 10; i++ {\n\t\tx += i\n\t}\n}\n",
    "naïve café résumé Ünïcödé façade",
    "日本語のテキストと中文字符，한국어 텍스트。",
    "I ❤️ 🦀 and 👨‍👩‍👧‍👦 family 🇺🇸 ok👍🏽",
    "3.14159 1234567890 1,000,000 0x1F 12e-5 ٣٤٥ ½ Ⅻ ²",
    "a    b\t\t\tc  \n   \n\n   d   ",
    "end with spaces    ",
    "line1\r\nline2\r\n\r\nline3\rline4\n\r\n",
    "I'm you're they've he'd we'll it's DON'T I'M She'LL",
    "〈|EOS|〉Hello</assistant>\n<assistant><think>x</think>〈|PAD|〉",
    "〈|EOS| and </assistant and <assistant> <assistan",
    "</assistant></assistant>〈|EOS|〉〈|EOS|〉 <tool_call>f</tool_call>",
    "",
    "   ",
    "\n\n\n",
    "!!! ??? ... --- === ((( ))) {{ }} [[]] <<>> ;;\n",
    "https://example.com/path?q=1&r=2#frag user@example.org",
    "a" * 60,
    "a\u00a0b\u3000c\u2028d\u0085e\u000bf\u000cg\u200bh\u2009i",
    "e\u0301 a\u0308 ñ n\u0303",
    "it'ſ fine, it'S fine, it'K",
    "Привет мир Γειά σου κόσμε مرحبا بالعالم שלום עולם हिन्दी ไทย",
    "\x00\x01\x1b[31mred\x1b[0m\x7f",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "# Title\n\n- item 1\n- item 2\n\n```python\nprint('x')\n```\n",
    "\n\n    indented\n\tTabbed\n",
    "ĠĊ ĉ Ġx",
    " \n x foo \n\n bar \r\n baz",
    "abc123def 4567x _under_score__ camelCaseWord",
    "'s 's ''s '",
    "    return x\n\n\n\nclass A:\n    pass",
    "\t\n\t\n",
    "x\n",
]
for path, n in [("/usr/lib/python3.11/textwrap.py", 3000), ("/usr/lib/python3.11/heapq.py", 2500)]:
    t = excerpt(path, n)
    if t:
        texts.append(t)

with open("texts.json", "w", encoding="utf-8") as f:
    json.dump(texts, f, ensure_ascii=True, indent=1)
    f.write("\n")
print(len(texts), "texts")
