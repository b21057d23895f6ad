#!/usr/bin/env python3
"""gen_unicode_scripts.py: writes src/anatomy/data/generated/unicode_scripts.cpp, the script of every code point
as the UnicodeScripts pre-tokenizer (src/anatomy/data/tokenizer/unicode_scripts.cpp) compares them.

Hugging Face tokenizers' UnicodeScripts splits a text where the Unicode script changes. Its script data is a
table of its own (pre_tokenizers/unicode_scripts/scripts.rs, generated from an old Unicode by SentencePiece's
script), where every code point the table does not list is "Any"; on top of it the pre-tokenizer counts
Hiragana, Katakana and U+30FC (KATAKANA-HIRAGANA PROLONGED SOUND MARK) as Han and U+0020 as Any. Any never
causes a split, is never remembered as the last script, and leading Any characters of a piece are dropped.

The table here stores that final ("fixed") script, Any = 0. It starts from Perl's Unicode::UCD (the Script
property of the Unicode of the Perl on this machine, 14.0.0 for Perl 5.36): Unknown becomes Any, Hiragana and
Katakana become Han, U+30FC Han and U+0020 Any. Then, because identical pieces are the goal, the installed
`tokenizers` is asked about every code point c (0 to 0x10FFFF, surrogates excepted):

  * pre_tokenize_str(chr(c - 1) + chr(c)): whether the pair splits, whether it comes back whole, or without
    its first character (that one is Any), or not at all (both Any); this gives every code point's Any-ness
    and whether it has the same script as the code point before it;
  * where Any code points lie between two scripted ones, the two scripted neighbours as a pair;
  * the first code point of every run of one script against one representative of each script, the
    representatives against each other: the runs' scripts are thereby identified, not only their borders.

Where the library and the Perl table disagree, the library's answer is taken (code points that Unicode 14
assigns and the crate does not: Any; scripts the crate lacks: Any; code points whose script changed). The
number of corrections, with examples, goes into the generated file's header and to stdout. Finally the
corrected table is checked against every pair again.

The table is sorted ranges, one uint32 each: (first code point << 8) | script.

    /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/python scripts/gen_unicode_scripts.py [--out src/anatomy/data/generated/unicode_scripts.cpp]
"""
import argparse
import os
import subprocess
import sys
from collections import Counter

import tokenizers
from tokenizers import pre_tokenizers

ANY = "Any"
LAST = 0x10FFFF


def is_surrogate(cp):
    return 0xD800 <= cp <= 0xDFFF


def code_points():
    return [cp for cp in range(LAST + 1) if not is_surrogate(cp)]


def perl_scripts():
    """(Unicode version, [script name per code point]) from Perl's Unicode::UCD."""
    program = r'''
        use Unicode::UCD qw(prop_invmap);
        my ($list, $map) = prop_invmap("Script");
        print Unicode::UCD::UnicodeVersion(), "\n";
        print "$list->[$_] $map->[$_]\n" for 0 .. $#$list;
    '''
    lines = subprocess.run(["perl", "-e", program], check=True, capture_output=True, text=True).stdout.split("\n")
    version = lines[0].strip()
    starts = []
    for line in lines[1:]:
        if line.strip():
            start, name = line.split()
            starts.append((int(start), name))
    scripts = [None] * (LAST + 1)
    for i, (start, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else LAST + 1
        for cp in range(start, min(end, LAST + 1)):
            scripts[cp] = name
    return version, scripts


def fixed(cp, name):
    """The pre-tokenizer's script of a code point whose Unicode script is `name`."""
    if cp == 0x30FC:
        return "Han"
    if cp == 0x20 or name == "Unknown":
        return ANY
    if name in ("Hiragana", "Katakana"):
        return "Han"
    return name.replace("_", "")


class Library:
    """The installed UnicodeScripts, asked about short texts."""

    def __init__(self):
        self.pre = pre_tokenizers.UnicodeScripts().pre_tokenize_str
        self.calls = 0

    def pieces(self, text):
        self.calls += 1
        return [(s, tuple(o)) for s, o in self.pre(text)]

    def splits(self, a, b):
        """Whether two scripted code points split (have different scripts)."""
        result = self.pieces(chr(a) + chr(b))
        assert len(result) in (1, 2) and result[0][1][0] == 0, (hex(a), hex(b), result)
        return len(result) == 2


def pair_outcome(pieces):
    """The library's answer for chr(p) + chr(c): 'none', 'second', 'whole' or 'split'."""
    if not pieces:
        return "none"  # both Any
    if len(pieces) == 2:
        return "split"  # both scripted, different scripts
    assert len(pieces) == 1, pieces
    return "second" if pieces[0][1][0] == 1 else "whole"


def predicted_outcome(a, b):
    """The same answer from table values a, b (the pre-tokenizer's rule)."""
    if a == ANY:
        return "none" if b == ANY else "second"
    if b != ANY and a != b:
        return "split"
    return "whole"


def previous(cp):
    return cp - 1 if cp - 1 != 0xDFFF else 0xD7FF


def probe_pairs(lib, cps):
    """{c: outcome of chr(previous(c)) + chr(c)} for every code point but 0."""
    return {cp: pair_outcome(lib.pieces(chr(previous(cp)) + chr(cp))) for cp in cps if cp != 0}


def library_any(lib, cps, pairs):
    """Every code point's Any-ness as the library has it (from the pairs, U+10FFFF on its own)."""
    any_of = {}
    for cp in cps:
        if cp == 0:
            continue
        p = previous(cp)
        any_of[p] = pairs[cp] in ("none", "second")
    any_of[LAST] = lib.pieces(chr(LAST)) == []
    # The pairs also say, for each c after a scripted code point, nothing about c's Any-ness when 'whole';
    # it comes from the next pair, consistently: a pair 'none'/'second' needs its first one Any.
    for cp in cps:
        if cp == 0:
            continue
        if pairs[cp] in ("none",):
            assert any_of[cp], hex(cp)
        if pairs[cp] in ("second", "split"):
            assert not any_of[cp], hex(cp)
    return any_of


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out", default=os.path.join(root, "src/anatomy/data/generated/unicode_scripts.cpp"))
    args = parser.parse_args()

    cps = code_points()
    version, perl = perl_scripts()
    table = [ANY] * (LAST + 1)
    for cp in cps:
        table[cp] = fixed(cp, perl[cp])
    spec = list(table)

    lib = Library()
    pairs = probe_pairs(lib, cps)
    any_of = library_any(lib, cps, pairs)
    pair_mismatches = sum(1 for cp in cps if cp != 0 and predicted_outcome(spec[previous(cp)], spec[cp]) != pairs[cp])

    # Any-ness: the library's.
    scripted = [cp for cp in cps if not any_of[cp]]
    for cp in cps:
        if any_of[cp]:
            table[cp] = ANY
        elif table[cp] == ANY:
            table[cp] = None  # scripted in the library, Any here: identified below

    # Representatives: the first code point of each script's longest run (in the library's view).
    runs, start = [], None  # runs of scripted code points that the library does not split
    last = None
    for cp in scripted:
        if last is None:
            start = cp
        else:
            same = not pairs[cp] == "split" if last == previous(cp) else not lib.splits(last, cp)
            if not same:
                runs.append((start, last))
                start = cp
        last = cp
    runs.append((start, last))
    members = {}
    for lo, hi in runs:
        members[(lo, hi)] = [cp for cp in range(lo, hi + 1) if not is_surrogate(cp) and not any_of[cp]]
    longest = {}
    for run, cs in members.items():
        names = Counter(table[cp] for cp in cs if table[cp] is not None)
        if not names:
            continue
        name, count = names.most_common(1)[0]
        if count == len(cs) and (name not in longest or len(members[longest[name]]) < len(cs)):
            longest[name] = run
    representative = {name: run[0] for name, run in longest.items()}
    names = sorted(representative)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert lib.splits(representative[a], representative[b]), (a, b)

    # Each run's script: its majority name when the representative agrees, else the one that does.
    new_names = 0
    for run, cs in members.items():
        votes = Counter(table[cp] for cp in cs if table[cp] is not None)
        guess = votes.most_common(1)[0][0] if votes else None
        if guess in representative and not lib.splits(representative[guess], run[0]):
            name = guess
        else:
            matches = [n for n in names if not lib.splits(representative[n], run[0])]
            assert len(matches) <= 1, (hex(run[0]), matches)
            if matches:
                name = matches[0]
            else:
                new_names += 1
                name = f"Script{new_names}"
                representative[name] = run[0]
                names.append(name)
        for cp in cs:
            table[cp] = name

    # The corrections, by kind.
    kinds = {"script -> Any (not in the crate's table)": [], "Any -> script": [], "script -> other script": []}
    for cp in cps:
        if table[cp] == spec[cp]:
            continue
        if table[cp] == ANY:
            kinds["script -> Any (not in the crate's table)"].append(cp)
        elif spec[cp] == ANY:
            kinds["Any -> script"].append(cp)
        else:
            kinds["script -> other script"].append(cp)
    dropped = sorted(set(spec[cp] for cp in cps) - set(table[cp] for cp in cps))

    # Check: the corrected table predicts every pair.
    for cp in cps:
        if cp != 0:
            assert predicted_outcome(table[previous(cp)], table[cp]) == pairs[cp], hex(cp)
    assert (lib.pieces(chr(0)) == []) == (table[0] == ANY)

    # Numbers: Any = 0, then the names in order.
    ordered = [ANY] + sorted(set(table[cp] for cp in cps) - {ANY})
    number = {name: i for i, name in enumerate(ordered)}
    assert len(ordered) <= 256
    ranges = []
    for cp in range(LAST + 1):
        value = number[table[cp]] if not is_surrogate(cp) else 0
        if not ranges or ranges[-1][1] != value:
            ranges.append((cp, value))

    summary = []
    for kind, found in kinds.items():
        if kind == "script -> other script":
            summary.append("//   {:<42} {:>6} code points{}".format(kind + ":", len(found), ":" if found else ""))
            for i in range(0, min(len(found), 8), 2):
                summary.append("//     " + ", ".join(
                    "U+{:04X} {} -> {}".format(cp, spec[cp], table[cp]) for cp in found[i:i + 2]))
            continue
        examples = " ".join("U+{:04X}".format(cp) for cp in found[:6])
        summary.append("//   {:<42} {:>6} code points{}".format(
            kind + ":", len(found), " (e.g. " + examples + ")" if found else ""))
    summary.append("//   scripts of Unicode {} that the crate does not have ({}):".format(version, len(dropped)))
    for i in range(0, len(dropped), 8):
        summary.append("//     " + " ".join(dropped[i:i + 8]))
    ranges_text = "\n".join(
        "    " + ", ".join("0x{:06X}{:02X}".format(cp, v) for cp, v in ranges[i:i + 8]) + ","
        for i in range(0, len(ranges), 8))
    names_text = "\n".join(
        "    " + " ".join('"{}",'.format(n) for n in ordered[i:i + 8]) for i in range(0, len(ordered), 8))
    header = f"""// unicode_scripts.cpp: GENERATED by scripts/gen_unicode_scripts.py; do not edit.
//
// The script of every code point as the UnicodeScripts pre-tokenizer of Hugging Face tokenizers
// {tokenizers.__version__} compares them (unicode_scripts.h): the crate's own script table (an older Unicode;
// what it does not list is Any), with Hiragana, Katakana and U+30FC counted as Han and U+0020 as Any.
// Computed from Perl's Unicode::UCD (Unicode {version}) and checked against the library on every pair of
// neighbouring code points ({len(pairs)} pairs; {pair_mismatches} disagreed before correction) and on every
// run of one script ({len(members)} runs); the library's answer was taken where they differ:
{chr(10).join(summary)}
"""
    body = f"""
#include "anatomy/data/tokenizer/unicode_scripts.h"

namespace anatomy::data::tok::script_table {{

// Sorted by code point: (first code point << 8) | script; a range lasts until the next one starts.
const uint32_t kRanges[] = {{
{ranges_text}
}};
const size_t kRangeCount = {len(ranges)};

const char* const kNames[] = {{
{names_text}
}};
const size_t kNameCount = {len(ordered)};

}}  // namespace anatomy::data::tok::script_table
"""
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(header + body)
    print(f"wrote {args.out}: {len(ranges)} ranges, {len(ordered)} scripts (Any included), "
          f"{lib.calls} library calls")
    print(f"tokenizers {tokenizers.__version__} against Perl Unicode {version}: "
          f"{pair_mismatches} of {len(pairs)} pairs disagreed before correction")
    print("\n".join(line[3:] for line in summary))


if __name__ == "__main__":
    sys.exit(main())
