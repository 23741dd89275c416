"""Token ids to and from llama.cpp's examples, which take a prompt as text and print generated tokens as text.

llama-speculative-simple and llama-simple have no token-id input or output. So the bench's ids go in as the text their
pieces spell (llama.cpp's own token_to_piece rules, read from the target GGUF's vocabulary), without the tokens
llama.cpp adds itself (the BOS, and with a SentencePiece vocabulary the leading word boundary); the examples echo the
pieces of the ids they tokenized, which must spell the bench's ids again (llamacpp_log.generated_bytes refuses
otherwise), and the prompt's token count must match. Generated text comes back as ids by greedy longest match over
the same pieces, and the count must equal the tokens llama.cpp says it generated: exact whenever a piece boundary is
unambiguous (the test pair's letters), and an error otherwise, never a guess."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import EngineError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # llama.cpp's token types


def _gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: printable bytes map to themselves, the rest to U+0100 upwards."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def _piece(text: str, kind: int, model: str, byte_decoder: dict[str, int]) -> bytes:
    """What llama_token_to_piece(..., special=true) prints for one token (llama-vocab.cpp, b11434)."""
    if kind in (UNKNOWN, CONTROL, USER_DEFINED):
        return text.encode()
    if kind == BYTE:  # "<0xAB>"
        return bytes([int(text[3:5], 16)])
    if kind != NORMAL:
        return b""
    if model == "gpt2":
        return b"".join(bytes([byte_decoder[c]]) if c in byte_decoder else c.encode() for c in text)
    return text.replace("\u2581", " ").encode()


@dataclass(frozen=True)
class LlamaCppVocab:
    pieces: tuple[bytes, ...]
    model: str  # tokenizer.ggml.model: "llama" (SentencePiece), "gpt2" (byte-level BPE), ...
    bos: int | None
    add_bos: bool
    add_space_prefix: bool
    eos: int | None

    @classmethod
    def from_metadata(cls, meta: dict) -> LlamaCppVocab:
        """From the target GGUF's metadata (its tokenizer.ggml.* keys)."""
        model = meta.get("tokenizer.ggml.model", "")
        tokens = meta.get("tokenizer.ggml.tokens") or []
        kinds = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
        decoder = _gpt2_byte_decoder()
        return cls(tuple(_piece(t, k, model, decoder) for t, k in zip(tokens, kinds)), model,
                   meta.get("tokenizer.ggml.bos_token_id"), bool(meta.get("tokenizer.ggml.add_bos_token", False)),
                   bool(meta.get("tokenizer.ggml.add_space_prefix", model == "llama")),
                   meta.get("tokenizer.ggml.eos_token_id"))

    def render(self, ids: list[int]) -> bytes:
        """The text llama.cpp prints for these ids."""
        try:
            return b"".join(self.pieces[i] for i in ids)
        except IndexError:
            raise EngineError(f"A token id of the bench is past llama.cpp's vocabulary of {len(self.pieces)} tokens.",
                              "The target GGUF was written from another tokenizer than the target folder's: "
                              "reconvert it.") from None

    def prompt_text(self, ids: list[int]) -> str:
        """The text that llama.cpp tokenizes back into `ids` (checked after the run: llamacpp_log.generated_bytes)."""
        own = ids[1:] if self.add_bos and ids and ids[0] == self.bos else ids
        text = self.render(own)
        if self.model == "llama" and self.add_space_prefix and text.startswith(b" "):
            text = text[1:]  # SentencePiece: llama.cpp puts the word boundary before the text itself
        try:
            return text.decode()
        except UnicodeDecodeError:
            raise EngineError("The prompt's ids do not spell whole UTF-8 characters, so llama.cpp (which takes the "
                              "prompt as text) cannot be given the same ids.",
                              "Bench prompts given as text, or ids the target's tokenizer produces for some text."
                              ) from None

    def ids_of(self, text: bytes, count: int | None, tool: str, encode=None, at_most: int | None = None
               ) -> list[int]:
        """Printed text back to ids. Two splits: greedy longest match over the pieces, and `encode` (the target
        tokenizer's own split), tried first for byte-level BPE, whose models mostly emit the tokenizer's split.
        `count`: how many tokens llama.cpp printed, when it says; else `at_most` (it generated that many, and printed
        fewer when it stopped at the end of generation). The first split that fits is taken; none is an error."""
        splits = [lambda: self._longest_match(text, tool)]
        if encode is not None:
            splits.insert(0 if self.model == "gpt2" else 1, lambda: encode(text))
        found = []
        for split in splits:
            found.append(split())
            if len(found[-1]) == count or (count is None and len(found[-1]) <= at_most):
                return found[-1]
        raise EngineError(f"{tool} generated {count if count is not None else at_most} tokens, but their printed "
                          f"text splits into {' or '.join(str(len(ids)) for ids in found)} pieces of the vocabulary, "
                          "so the ids cannot be recovered exactly.",
                          "llama.cpp's examples print text, not ids (docs/llamacpp.md), and this output splits "
                          "neither by longest match nor as the target's tokenizer splits it: bench other prompts.")

    def _longest_match(self, text: bytes, tool: str) -> list[int]:
        lookup: dict[bytes, int] = {}
        for i, piece in enumerate(self.pieces):
            if piece:
                lookup.setdefault(piece, i)
        longest = max(map(len, lookup), default=1)
        ids, at = [], 0
        while at < len(text):
            for size in range(min(longest, len(text) - at), 0, -1):
                if text[at:at + size] in lookup:
                    ids.append(lookup[text[at:at + size]])
                    at += size
                    break
            else:
                raise EngineError(f"{tool} printed text that no token of the target GGUF spells "
                                  f"({text[at:at + 20]!r}).", "Reconvert the target with `make llamacpp`'s converter.")
        return ids
