"""Functions that two top-level scripts share are copies, and copies must stay identical.

A function (or class) with the same name in two algorithm files must have the same source, character
for character; a deliberate difference takes a new name (the single-file design: each script stands
alone)."""

import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "*.py")))


def top_level_definitions(path):
    source = open(path, encoding="utf-8").read()
    tree = ast.parse(source)
    defs = {}
    for node in tree.body:
        if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ) and node.name not in ("Args", "main"):
            defs[node.name] = ast.get_source_segment(source, node)
    return defs


def test_there_are_scripts():
    assert any(os.path.basename(p) == "filtered_bc.py" for p in SCRIPTS)


def test_same_name_means_same_source():
    defs = {os.path.basename(p): top_level_definitions(p) for p in SCRIPTS}
    mismatches = []
    names = sorted({n for d in defs.values() for n in d})
    for name in names:
        holders = [(f, d[name]) for f, d in defs.items() if name in d]
        first_file, first_src = holders[0]
        for f, src in holders[1:]:
            if src != first_src:
                mismatches.append(f"{name}: {first_file} and {f} differ")
    assert not mismatches, "\n".join(mismatches)


def test_scripts_import_nothing_from_each_other():
    modules = {os.path.splitext(os.path.basename(p))[0] for p in SCRIPTS}
    for path in SCRIPTS:
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "").split(".")[0]]
            else:
                continue
            assert not set(names) & modules, (
                f"{os.path.basename(path)} imports another top-level script: {names}"
            )


def test_gelu_tanh_is_the_library_activation():
    """Every load_actor swaps GPT-2's activation (transformers' NewGELUActivation, eight
    element-wise operations) for gelu_tanh, torch's fused kernel of the same formula: outputs and
    gradients equal the library's up to float rounding (float32: a few ulp; bfloat16: within one
    bfloat16 step of the exact value: the fused kernel computes in float32 and rounds once); and a
    loaded actor's logits and greedy ids are the unpatched model's."""
    import sys

    import torch
    from transformers.activations import NewGELUActivation

    sys.path.insert(0, ROOT)
    import archer

    lib = NewGELUActivation()
    for shape in ((3, 7, 512), (64, 1, 128), (5,)):
        x = torch.randn(shape) * 4
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = archer.gelu_tanh(a), lib(b)
        torch.testing.assert_close(ya, yb, rtol=1e-6, atol=1e-6)
        w = torch.randn(ya.shape)
        (ya * w).sum().backward()
        (yb * w).sum().backward()
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
        with torch.no_grad():
            x16 = x.bfloat16()
            exact, fused16 = lib(x16.double()).float(), archer.gelu_tanh(x16).float()
            # one bfloat16 step, or float32's cancellation in 1 + tanh(·) where the output is ~0
            assert ((fused16 - exact).abs() <= exact.abs() / 128 + 1e-5).all()
    for path in SCRIPTS:  # every script's load_actor installs it
        src = open(path, encoding="utf-8").read()
        if "\ndef load_actor(" in src:
            assert "m.forward = gelu_tanh" in src, os.path.basename(path)

    torch.manual_seed(0)
    model, tok = archer.load_actor("tiny", "twenty_questions_subset")
    acts = [m for m in model.modules() if type(m).__name__ == "NewGELUActivation"]
    assert acts and all(m.forward is archer.gelu_tanh for m in acts)
    ids = torch.tensor([tok("Is it an animal?\n")["input_ids"]] * 2)
    with torch.no_grad():
        fast = model(ids).logits
        fast_ids = model.generate(ids, do_sample=False, max_new_tokens=12, pad_token_id=0)
        for m in acts:
            del m.forward  # back to the class's forward
        assert all(m.forward.__func__ is NewGELUActivation.forward for m in acts)
        slow_ids = model.generate(ids, do_sample=False, max_new_tokens=12, pad_token_id=0)
        torch.testing.assert_close(model(ids).logits, fast, rtol=1e-5, atol=1e-5)
        assert torch.equal(fast_ids, slow_ids)
