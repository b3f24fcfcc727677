"""The shell blocks of a Markdown page, for the tests that run them as
written (tests/compose_doc_blocks.py, tests/k8s/run_doc_blocks.py)."""
import re


def shell_blocks(path, section=None):
    """The ```sh blocks of PATH, in order; of its section SECTION (a "## "
    title) alone when given."""
    with open(path) as f:
        text = f.read()
    if section:
        m = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(section), text, re.M | re.S)
        text = m.group(1) if m else ""
    return re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)
