"""Everything the converter needs from the Hugging Face Hub, only through `huggingface_hub`: resolve a repo id and a
revision to a commit sha and its file sizes, download small files into the standard cache (pinned to that sha)
(repos.py), and read byte ranges of big files (a safetensors header, one tensor) without downloading the rest
(ranges.py); hub_source.py serves a repo as a FileSource (io/source.py), and hub_errors.py holds the typed errors the
Hub's failures become.

huggingface_hub reads HF_ENDPOINT / HF_HOME / HF_HUB_OFFLINE when it is imported: import these modules late (after
the CLI has parsed its options), or run them in a fresh process. This package's own __init__ imports nothing, so that
naming it imports no huggingface_hub.
"""
