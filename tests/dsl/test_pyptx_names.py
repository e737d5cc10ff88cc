"""docs/coming-from-pyptx.md's table of pyptx's documented names stays true of ptxdsl:
each name (and member) it says ptxdsl has resolves, each it says ptxdsl lacks does not.
(lab/pyptx_names.py writes the table from pyptx's own pages; this test needs no pyptx.)"""
from __future__ import annotations

import re

from lab.pyptx_names import ABSENT, BEGIN, DOC, ELSEWHERE, END, _samples, resolve


def rows():
    doc = open(DOC, encoding="utf-8").read()
    body = doc[doc.index(BEGIN) + len(BEGIN):doc.index(END)].strip().splitlines()[2:]
    for line in body:
        names, members, status = [c.strip() for c in line.strip("|").split("|")]
        yield re.findall(r"`([\w.]+)`", names), members, status


def test_the_names_table_is_true_of_ptxdsl():
    samples = _samples()
    said_present = said_absent = 0
    for keys, members, status in rows():
        if re.fullmatch(r"\d+ names", members):
            continue   # a whole pyptx module ptxdsl has no counterpart of
        for key in keys:
            page, _, name = key.partition(".")
            if key in ELSEWHERE:
                continue
            if key in ABSENT and status == ABSENT[key]:
                assert not resolve(page, name, samples), f"{key} exists: regenerate the table"
                said_absent += 1
                continue
            assert resolve(page, name, samples), f"the docs say ptxdsl has {key}"
            for m in filter(None, (x.strip() for x in members.split(","))):
                assert resolve(page, f"{name}.{m}", samples), f"the docs say {key}.{m}"
            said_present += 1
    assert said_present > 100 and said_absent > 10


def test_the_table_lists_every_name_the_lab_script_knows_to_be_absent():
    listed = {k for keys, _, _ in rows() for k in keys}
    assert [key for key, why in ABSENT.items() if why and key not in listed] == []
