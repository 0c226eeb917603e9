"""Helpers the CLI tests share: reading rich's wrapped output and checking a refusal."""

from __future__ import annotations

import re


def flat(text: str) -> str:
    """Collapse whitespace: rich wraps long lines at the console width."""
    return re.sub(r"\s+", " ", text)


def refused(res, *fragments: str) -> str:
    """Exit 2, one 'error:' message on stderr holding every fragment, no traceback; returns the message."""
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    err = flat(res.stderr).strip()
    assert err.startswith("error:"), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err
