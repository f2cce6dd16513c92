"""Build the tiny test model that the real-engine tier serves on vLLM CPU.

    python tiny_model.py OUT_DIR [LONG_DIR]

Offline and deterministic: the tokenizer is a byte-level BPE trained on the
corpus below, the weights come from a fixed seed and are saved once as
safetensors, so every engine (and every restart) serves the same model. The
architecture is Llama (served by vLLM on CPU); the sizes are chosen for the
CPU attention backend (head size 32 is one it accepts) and for speed on two
cores: a step of a few hundred tokens takes milliseconds.

The chat template is ChatML and renders system, user, assistant (with tool
calls) and tool messages, and tools given in the request, so that vLLM's
chat completions, Anthropic messages and Responses endpoints all render.

Writes OUT_DIR/warden-tiny.json with the configuration and a hash of every
file, which the install script compares to decide whether to rebuild.

LONG_DIR, when given, gets the same model with a long context (LONG_CONTEXT
tokens: a coding agent's first request, its system prompt and tool
definitions, is ~50k tokens of this tokenizer) and a server-wide output cap
(generation_config.json max_new_tokens, which vLLM applies to every request):
random weights rarely stop on their own, and an agent asks for 32k output
tokens, so without the cap a turn would decode for minutes. The real-client
checks (scripts/e2e-real-clients.sh ENGINE=vllm) serve it.
"""

import hashlib
import json
import os
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")  # BPE training order stays fixed
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Bumped whenever anything below changes what gets written.
RECIPE = 1

VOCAB = 1024  # at most; the model's vocab_size is what training produced
CONFIG = dict(
    architectures=["LlamaForCausalLM"],
    model_type="llama",
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,  # head size 32
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=16384,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    torch_dtype="float32",
)

LONG_CONTEXT = 131072
LONG_MAX_NEW_TOKENS = 48

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = r"""{%- macro text(content) -%}
{%- if content is string -%}{{ content }}
{%- elif content -%}{%- for part in content -%}{%- if part.type == 'text' -%}{{ part.text }}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- if tools -%}
<|im_start|>system
{% if messages and messages[0].role == 'system' %}{{ text(messages[0].content) }}

{% endif %}# Tools
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}<|im_end|>
{% elif messages and messages[0].role == 'system' -%}
<|im_start|>system
{{ text(messages[0].content) }}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'tool' -%}
<|im_start|>tool
{{ text(message.content) }}<|im_end|>
{% else -%}
<|im_start|>{{ message.role }}
{{ text(message.content) }}
{%- if message.tool_calls -%}{%- for call in message.tool_calls %}
<tool_call>{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}</tool_call>
{%- endfor -%}{%- endif -%}
<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}"""

# A fixed corpus: English prose about the domain, code and JSON, so that the
# merges cover what agent requests contain. Its order is part of the recipe.
CORPUS = [
    "You are a coding agent. Read the repository, run the tests, and fix what fails.",
    "The prefix cache keeps the key and value tensors of prompts the engine has seen.",
    "A conversation resends its whole history on every turn; the cache makes that cheap.",
    "Each data-parallel replica has its own cache, so a turn placed elsewhere is prefilled again.",
    "def main():\n    for i in range(10):\n        print(i)\n    return 0\n",
    "func main() {\n\tfor i := 0; i < 10; i++ {\n\t\tfmt.Println(i)\n\t}\n}\n",
    '{"role": "user", "content": "List the files in the current directory."}',
    '{"name": "bash", "arguments": {"command": "ls -la && go test ./..."}}',
    "<tool_call>read_file path=README.md</tool_call> The file starts with two commands.",
    "The quick brown fox jumps over the lazy dog. 0123456789 !@#$%^&*()_+-=[]{};:'\",.<>/?",
    "Summarise what a prefix cache is in one line. It is a cache of attention state.",
    "error: cannot find module; run go mod tidy and try again. warning: unused variable.",
]


def corpus():
    # Repeat with small variations so that merges have counts to rank by.
    for round_ in range(50):
        for i, line in enumerate(CORPUS):
            yield f"{line} ({round_}:{i})"


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    if tok.get_vocab_size() > VOCAB:
        raise SystemExit(f"tokenizer has {tok.get_vocab_size()} tokens, more than vocab_size {VOCAB}")
    return tok


def write_long(out, long_dir):
    """The model of out with a long context and an output cap, in long_dir."""
    import shutil

    os.makedirs(long_dir, exist_ok=True)
    for name in os.listdir(out):
        if name not in ("config.json", "tokenizer_config.json", "generation_config.json", "warden-tiny.json"):
            shutil.copy2(os.path.join(out, name), os.path.join(long_dir, name))
    for name, edit in (
        ("config.json", {"max_position_embeddings": LONG_CONTEXT}),
        ("tokenizer_config.json", {"model_max_length": LONG_CONTEXT}),
        ("generation_config.json", {"max_new_tokens": LONG_MAX_NEW_TOKENS}),
    ):
        with open(os.path.join(out, name)) as f:
            doc = json.load(f)
        doc.update(edit)
        with open(os.path.join(long_dir, name), "w") as f:
            json.dump(doc, f, indent=2)
    with open(os.path.join(out, "warden-tiny.json")) as f:
        meta = json.load(f)
    meta.update(long_context=LONG_CONTEXT, max_new_tokens=LONG_MAX_NEW_TOKENS)
    with open(os.path.join(long_dir, "warden-tiny.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
    print(f"tiny model, long context: {LONG_CONTEXT} tokens, at most {LONG_MAX_NEW_TOKENS} out, in {long_dir}")


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit("usage: tiny_model.py OUT_DIR [LONG_DIR]")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = build_tokenizer()
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=CONFIG["max_position_embeddings"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    cfg = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        **{k: v for k, v in CONFIG.items() if k not in ("architectures", "model_type")},
        bos_token_id=ids["<|im_start|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    cfg.architectures = CONFIG["architectures"]
    torch.manual_seed(20261201)
    model = LlamaForCausalLM(cfg).to(torch.float32)
    # Init is seeded, but scale the weights so logits are not all flat: a
    # flat distribution samples uniformly, which is fine, but a small spread
    # keeps greedy decoding from repeating one token forever.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(4.0)
    model.save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"]}, f, indent=2)

    files = {}
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        if name == "warden-tiny.json" or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            files[name] = hashlib.sha256(f.read()).hexdigest()[:16]
    params = sum(p.numel() for p in model.parameters())
    meta = dict(recipe=RECIPE, parameters=params, vocab=tok.get_vocab_size(), config=CONFIG, files=files)
    with open(os.path.join(out, "warden-tiny.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
    print(f"tiny model: {params} parameters, vocab {tok.get_vocab_size()}, in {out}")
    if len(sys.argv) == 3:
        write_long(out, sys.argv[2])


if __name__ == "__main__":
    main()
