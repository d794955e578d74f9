#!/usr/bin/env python3
"""Collects the training corpus for the bundled tiny model: Go source that ships
with every Go toolchain (GOROOT/src and GOROOT/test), copied into OUT (default
.corpus/ in the repository root, which .git/info/exclude ignores).

    python3 training/prepare_corpus.py [--goroot /usr/local/go] [--out .corpus] [--limit-mb 14]

What goes in, in this order, until the limit:
  1. whole programs: GOROOT/test files that compile and run (no `// errorcheck`, no `// ERROR`
     annotations) and GOROOT/src files with `func main() {`;
  2. example_test.go files of the standard library (Example functions);
  3. the non-test source of commonly used packages (fmt, strings, net/http, go/ast, ...).
Generated files and files over 96 KB (tables) are left out. The output is OUT/corpus.txt, the files
joined with a line holding only U+001E (record separator) between them, and OUT/MANIFEST.txt
(path and size of every file, in order), so a run is reproducible from the same Go release.
"""
import argparse
import os
import shutil
import sys

PACKAGES = [
    "fmt", "strings", "strconv", "bytes", "sort", "slices", "maps", "io", "bufio", "os", "errors",
    "unicode", "math", "container", "encoding", "net/http", "net/url", "sync", "time", "text",
    "html", "go/ast", "go/parser", "go/scanner", "go/token", "go/printer", "go/format",
    "go/types", "flag", "path", "regexp", "log", "context", "crypto/sha256", "crypto/md5",
    "hash", "compress", "archive", "image", "mime", "embed", "iter", "cmp", "testing",
    "runtime/debug", "database/sql", "reflect", "os/exec", "io/fs", "net/mail", "net/rpc",
    "expvar", "index", "debug/elf", "cmd/gofmt", "net", "crypto", "go", "cmd/go/internal/modload",
    "cmd/go/internal/modfetch", "cmd/vet", "cmd/doc",
]
MAX_FILE = 96 * 1024
SEP = "\x1e"  # document separator in corpus.txt


def is_generated(head):
    return "Code generated" in head or "DO NOT EDIT" in head


def runnable_program(text):
    head = text[:400]
    if "errorcheck" in head or "// ERROR" in text or "// +build ignore" in head:
        return False
    return "func main() {" in text


def walk(root, pred):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".go"):
                p = os.path.join(dirpath, name)
                if pred(p, name):
                    yield p


def read(p):
    try:
        if os.path.getsize(p) > MAX_FILE:
            return None
        with open(p, encoding="utf-8") as f:
            t = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    if is_generated(t[:600]) or "\x00" in t or SEP in t:
        return None
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--goroot", default="/usr/local/go")
    ap.add_argument("--out", default=".corpus")
    ap.add_argument("--limit-mb", type=float, default=14)
    a = ap.parse_args()
    src, test = os.path.join(a.goroot, "src"), os.path.join(a.goroot, "test")
    limit = int(a.limit_mb * 1024 * 1024)

    groups = [
        ("programs", walk(test, lambda p, n: True), runnable_program),
        ("programs", walk(src, lambda p, n: not n.endswith("_test.go")), runnable_program),
        ("examples", walk(src, lambda p, n: n == "example_test.go" and "/testdata/" not in p), None),
    ]
    def package_file(p, n):
        return not n.endswith("_test.go") and "/testdata/" not in p

    for pkg in PACKAGES:
        groups.append(("packages", walk(os.path.join(src, pkg), package_file), None))

    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    seen, total, manifest, counts, docs = set(), 0, [], {}, []
    for kind, files, pred in groups:
        for p in files:
            rp = os.path.realpath(p)
            if rp in seen:
                continue
            t = read(rp)
            if t is None or (pred is not None and not pred(t)):
                continue
            n = len(t.encode("utf-8"))
            if total + n > limit:
                continue
            seen.add(rp)
            rel = os.path.relpath(rp, a.goroot)
            docs.append(t)
            total += n
            manifest.append(f"{rel}\t{n}")
            counts[kind] = counts.get(kind, 0) + n
    with open(os.path.join(a.out, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(("\n" + SEP + "\n").join(docs))
    with open(os.path.join(a.out, "MANIFEST.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(manifest) + "\n")
    print(f"{len(manifest)} files, {total/1e6:.2f} MB:",
          ", ".join(f"{k} {v/1e6:.2f} MB" for k, v in counts.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
