"""provision doctor, the analysis side: captured tool output in, findings out.

    from provision.doctor import diagnose_files, diagnose_texts, split_bundle

    report = diagnose_files(["nvidia-smi-q.xml", "dmesg.log"], matrix=matrix)
    report.exit_code          # 1 when any finding is an error, else 0
    report.to_dict()          # {"findings": [{id, severity, title, evidence, fix}, ...], "read": [...], ...}

    report = diagnose_texts(split_bundle(collector_output, token), matrix=matrix)

The collector (``collect``) emits sections delimited by ``===== provision-doctor: <key> =====
<token>`` lines, the token random per run, so that nothing a host prints starts a section; the
keys are ``SECTION_KEYS``. What doctor reads is bounded (``bounds``: lines, sections, a host's
output) and every pattern is linear in its input. Bad input raises ``provision.errors.InputError`` (exit 2);
broken compat/xid.yaml raises ``CompatDataError`` (exit 3). The severity policy is documented
in ``provision.doctor.rules``.
"""

from provision.doctor.classify import KINDS, SECTION_KEYS, classify, split_bundle
from provision.doctor.diagnose import (
    decode_bytes,
    diagnose_files,
    diagnose_named_texts,
    diagnose_texts,
)
from provision.doctor.model import Finding, Read, Report

__all__ = [
    "KINDS",
    "SECTION_KEYS",
    "Finding",
    "Read",
    "Report",
    "classify",
    "decode_bytes",
    "diagnose_files",
    "diagnose_named_texts",
    "diagnose_texts",
    "split_bundle",
]
