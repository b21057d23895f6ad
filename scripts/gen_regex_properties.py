#!/usr/bin/env python3
"""gen_regex_properties.py: writes src/anatomy/data/generated/regex_properties.cpp, what tokenizer.json's
regular expressions mean by \\p{...} and \\w where PCRE2 disagrees (src/anatomy/data/tokenizer/regex.cpp).

The library runs its patterns on Oniguruma, whose Unicode data (15.1 in tokenizers 0.23) is newer than
Debian's PCRE2 10.42 (Unicode 14): letters of CJK Extension H and I, Kawi, Nag Mundari and the other
characters of Unicode 15 and 15.1 are \\p{L} or \\p{Han} there and unassigned here. So every property name
that PCRE2 knows is asked of both engines, over every code point (surrogates excepted):
  - Oniguruma through the installed library: Split(\\p{name}, "removed") over one string of all code
    points; the characters missing from the pieces are the property's;
  - PCRE2 through libpcre2-8 (ctypes), compiled as regex.cpp compiles it (a script as \\p{sc:name}).
The code points that Oniguruma counts and PCRE2 does not are written as `added` ranges, the reverse as
`removed` ranges; a property on which both agree is not written. \\w is probed the same way, against the
class regex.cpp spells it as, alone and inside brackets (where Oniguruma's differs). The file lists names in PCRE2's loose form (lower case, no '_', '-', ' ').

    /tmp/tokvenv/bin/python scripts/gen_regex_properties.py [--out src/anatomy/data/generated/regex_properties.cpp]
"""
import argparse
import ctypes
import os
import subprocess

import tokenizers
from tokenizers import Regex, pre_tokenizers

PCRE2_UTF = 0x00080000
PCRE2_UCP = 0x00020000
PCRE2_NO_UTF_CHECK = 0x40000000
WORD = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}"  # regex.cpp's kWord
CATEGORIES = {"l", "lu", "ll", "lt", "lm", "lo", "l&", "lc", "m", "mn", "mc", "me", "n", "nd", "nl", "no", "p",
              "pc", "pd", "ps", "pe", "pi", "pf", "po", "s", "sm", "sc", "sk", "so", "z", "zs", "zl", "zp", "c",
              "cc", "cf", "cs", "co", "cn", "any", "xan", "xps", "xsp", "xwd", "xuc"}

CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
TEXT = "".join(chr(c) for c in CODE_POINTS)


def pcre2_names():
    """The property names PCRE2 knows, from the name table in its library (they are stored sorted)."""
    lib = "/usr/lib/x86_64-linux-gnu/libpcre2-8.so.0"
    words = subprocess.run(["strings", "-n", "1", lib], capture_output=True, text=True, check=True).stdout.split()
    start, end = words.index("adlam"), words.index("zzzz")
    return words[start:end + 1]


class Pcre2:
    def __init__(self):
        self.lib = ctypes.CDLL("libpcre2-8.so.0")
        self.lib.pcre2_compile_8.restype = ctypes.c_void_p
        self.lib.pcre2_compile_8.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                                             ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t),
                                             ctypes.c_void_p]
        self.lib.pcre2_match_data_create_8.restype = ctypes.c_void_p
        self.lib.pcre2_match_data_create_8.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
        self.lib.pcre2_match_8.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                           ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p]
        self.lib.pcre2_get_ovector_pointer_8.restype = ctypes.POINTER(ctypes.c_size_t)
        self.lib.pcre2_get_ovector_pointer_8.argtypes = [ctypes.c_void_p]
        self.lib.pcre2_code_free_8.argtypes = [ctypes.c_void_p]
        self.data = self.lib.pcre2_match_data_create_8(1, None)
        self.subject = TEXT.encode("utf-8")
        # byte offset -> index of the code point starting there
        self.index_at = {}
        at = 0
        for i, c in enumerate(CODE_POINTS):
            self.index_at[at] = i
            at += len(chr(c).encode("utf-8"))

    def compile(self, pattern):
        err, off = ctypes.c_int(), ctypes.c_size_t()
        p = pattern.encode()
        return self.lib.pcre2_compile_8(p, len(p), PCRE2_UTF | PCRE2_UCP, ctypes.byref(err), ctypes.byref(off), None)

    def members(self, code):
        """Indices into CODE_POINTS of the code points that `code` (a pattern X+) matches."""
        out, start = set(), 0
        while start < len(self.subject):
            rc = self.lib.pcre2_match_8(code, self.subject, len(self.subject), start, PCRE2_NO_UTF_CHECK, self.data,
                                        None)
            if rc < 0:
                break
            ov = self.lib.pcre2_get_ovector_pointer_8(self.data)
            a, b = ov[0], ov[1]
            i, j = self.index_at[a], self.index_at.get(b, len(CODE_POINTS))
            out.update(range(i, j))
            start = b if b > a else b + 1
        return out


def onig_members(pattern):
    """Indices of the code points that Oniguruma's `pattern` matches (None when it refuses the pattern)."""
    try:
        split = pre_tokenizers.Split(Regex(pattern), "removed")
    except Exception:
        return None
    kept = set()
    for _, (a, b) in split.pre_tokenize_str(TEXT):
        kept.update(range(a, b))
    return set(range(len(CODE_POINTS))) - kept


def ranges(indices):
    cps = sorted(CODE_POINTS[i] for i in indices)
    out = []
    for c in cps:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(root, "src/anatomy/data/generated/regex_properties.cpp"))
    args = ap.parse_args()
    pcre = Pcre2()
    entries = []  # (name, added ranges, removed ranges)
    # \w alone and inside brackets: Oniguruma's differ (alone it also takes the Latin-1 superscripts and
    # fractions, its ISO 8859-1 ctype table's "word" characters).
    probes = [("\\w", "\\w", f"[{WORD}]+"), ("[\\w]", "[\\w]", f"[{WORD}]+")]
    for name in pcre2_names():
        if name in CATEGORIES:
            probes.append((name, f"\\p{{{name}}}", f"\\p{{{name}}}+"))
        else:
            probes.append((name, f"\\p{{{name}}}", None))
    skipped = []
    for name, onig_pattern, pcre_pattern in probes:
        code = None
        if pcre_pattern is None:
            for p in (f"\\p{{sc:{name}}}+", f"\\p{{{name}}}+"):
                code = pcre.compile(p)
                if code:
                    break
        else:
            code = pcre.compile(pcre_pattern)
        onig = onig_members(onig_pattern)
        if not code or onig is None:
            skipped.append(name)
            continue
        here = pcre.members(code)
        pcre.lib.pcre2_code_free_8(code)
        added, removed = onig - here, here - onig
        if added or removed:
            entries.append((name, ranges(added), ranges(removed)))
    with open(args.out, "w") as f:
        f.write("// regex_properties.cpp: GENERATED by scripts/gen_regex_properties.py; do not edit.\n//\n")
        f.write(f"// Where tokenizers {tokenizers.__version__}'s Oniguruma and PCRE2 10.42 disagree on a property's code\n")
        f.write(f"// points, asked of both over every code point: {len(entries)} of {len(probes)} names differ.\n")
        f.write(f"// Names neither engine or only one knows (left as PCRE2 reads them): {' '.join(skipped)}.\n\n")
        f.write('#include "anatomy/data/tokenizer/regex_properties.h"\n\n')
        f.write("namespace anatomy::data::tok {\n\nnamespace {\n\n")
        for k, (name, added, removed) in enumerate(entries):
            for kind, rs in (("added", added), ("removed", removed)):
                f.write(f"const CodePointRange k{kind.capitalize()}{k}[] = {{\n")
                if not rs:
                    f.write("    {0, 0},  // none\n")
                for i in range(0, len(rs), 4):
                    f.write("    " + " ".join(f"{{0x{a:X}, 0x{b:X}}}," for a, b in rs[i:i + 4]) + "\n")
                f.write("};\n")
        f.write("\n}  // namespace\n\n")
        f.write("const PropertyDifference kPropertyDifferences[] = {\n")
        for k, (name, added, removed) in enumerate(entries):
            name_literal = name.replace("\\", "\\\\")
            f.write(f'    {{"{name_literal}", {{kAdded{k}, {len(added)}}}, {{kRemoved{k}, {len(removed)}}}}},\n')
        f.write("};\nconst size_t kPropertyDifferenceCount = sizeof(kPropertyDifferences) / sizeof(kPropertyDifferences[0]);\n\n")
        f.write("}  // namespace anatomy::data::tok\n")
    print(f"{len(entries)} of {len(probes)} names differ; skipped {len(skipped)}: {' '.join(skipped)}")
    for name, added, removed in entries:
        print(f"  {name}: +{sum(b - a + 1 for a, b in added)} in {len(added)} ranges, "
              f"-{sum(b - a + 1 for a, b in removed)} in {len(removed)} ranges")


if __name__ == "__main__":
    main()
