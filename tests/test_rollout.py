"""Rollouts: the KV-cache sampling loop against full no-cache forwards, masks, behavior log-probs, grouping."""
import pytest
import torch

from rlbook import rollout as rollout_module
from rlbook.models import build_model
from rlbook.decoding import positions
from rlbook.rollout import Rollout, decode, rollout, sample
from rlbook.tasks.arithmetic import ArithmeticTask
from rlbook.tasks.base import Score

PROMPTS = ["1+2=", "47+385=", "999*999=", "5=", "A:~B&C B:A>C ?", "0"]  # different lengths: left padding
EOS = 1


pytestmark = pytest.mark.usefixtures("one_thread")


class Biased(torch.nn.Module):
    """A model whose logits get `bias` added to some token ids (to make EOS or digits likely)."""

    def __init__(self, model, bias: torch.Tensor):
        super().__init__()
        self.inner, self.bias = model, bias

    def forward(self, **kwargs):
        out = self.inner(**kwargs)
        out.logits = out.logits + self.bias
        return out


@pytest.fixture(scope="module")
def model_and_tok():
    """nano-tiny with larger random weights, so that its outputs depend sharply on context and position."""
    model, tok = build_model("nano-tiny", seed=0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(0.25 * torch.randn(p.shape, generator=generator))
    model.eval()
    return model, tok


def biased(model_and_tok, eos=0.0, digits=0.0):
    model, tok = model_and_tok
    bias = torch.zeros(len(tok))
    bias[EOS] = eos
    bias[[tok.convert_tokens_to_ids(d) for d in "0123456789"]] = digits
    return Biased(model, bias)


def prompt_ids(tok, prompt):
    return tok(prompt, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def full_logits(model, ids):
    """Logits of one unpadded sequence from a full forward without any cache."""
    return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


@torch.no_grad()
def greedy_without_cache(model, tok, prompt, steps):
    ids, out = prompt_ids(tok, prompt), []
    for _ in range(steps):
        token = int(full_logits(model, ids + out)[-1].argmax())
        out.append(token)
        if token == EOS:
            break
    return out


def rows(ids, mask):
    """The response tokens of each row (mask 1), as lists."""
    return [[t for t, m in zip(r, k) if m] for r, k in zip(ids.tolist(), mask.tolist())]


def test_positions_skip_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]])
    assert positions(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 1, 1, 1]]


def test_mask_is_one_up_to_and_including_first_eos(model_and_tok):
    model, tok = model_and_tok
    generator = torch.Generator().manual_seed(0)
    p_ids, p_mask, ids, mask, logp = sample(biased(model_and_tok, eos=1.0), tok, PROMPTS * 2, 24, 1.0, generator)
    assert p_ids.shape == p_mask.shape == (12, 14) and ids.shape == mask.shape == logp.shape
    assert ids.shape[1] <= 24 and mask.dtype == torch.float32
    ended = 0
    for r, k, lp in zip(ids.tolist(), mask.tolist(), logp.tolist()):
        if EOS in r:
            first = r.index(EOS)
            ended += 1
            assert k == [1.0] * (first + 1) + [0.0] * (len(r) - first - 1)
            assert all(t == tok.pad_token_id for t in r[first + 1:])
            assert all(v == 0.0 for v in lp[first + 1:]) and all(v < 0 for v in lp[:first + 1])
        else:
            assert k == [1.0] * len(r)
    assert 0 < ended < 12  # the sample exercises both: rows that stop and rows that run to the end
    assert ids.shape[1] == 24  # some row ran the full budget


def test_stops_when_every_row_has_ended(model_and_tok):
    model, tok = model_and_tok
    _, _, ids, mask, logp = sample(biased(model_and_tok, eos=100.0), tok, PROMPTS, 20, 1.0,
                                   torch.Generator().manual_seed(0))
    assert ids.tolist() == [[EOS]] * len(PROMPTS) and mask.tolist() == [[1.0]] * len(PROMPTS)
    assert torch.allclose(logp, torch.zeros_like(logp), atol=1e-6)


def test_greedy_equals_step_by_step_argmax_without_cache(model_and_tok):
    model, tok = model_and_tok
    policy = biased(model_and_tok, eos=2.5)
    p_ids, p_mask, ids, mask, _ = sample(policy, tok, PROMPTS, 16, 0.0)
    expected = [greedy_without_cache(policy, tok, prompt, 16) for prompt in PROMPTS]
    assert rows(ids, mask) == expected
    assert any(EOS in e for e in expected) and any(EOS not in e for e in expected)  # both kinds of rows
    assert len({tuple(e) for e in expected}) >= 4  # the prompts lead to different completions
    # the prompts came back left-padded
    for prompt, row, m in zip(PROMPTS, p_ids.tolist(), p_mask.tolist()):
        pad = len(row) - len(prompt)
        assert m == [0] * pad + [1] * len(prompt) and row[pad:] == prompt_ids(tok, prompt)
    again = sample(policy, tok, PROMPTS, 16, 0.0)
    assert torch.equal(again[2], ids) and torch.equal(again[3], mask)


def behavior_logp_error(model, tok, temperature, seed=1):
    """Largest |behavior logp - log_softmax(logits / T)| of a full no-cache forward over prompt + completion."""
    generator = torch.Generator().manual_seed(seed)
    _, _, ids, mask, logp = sample(model, tok, PROMPTS, 12, temperature, generator)
    assert torch.all(logp[mask == 0] == 0)
    error = 0.0
    for i, (prompt, completion) in enumerate(zip(PROMPTS, rows(ids, mask))):
        start = len(prompt_ids(tok, prompt))
        logits = full_logits(model, prompt_ids(tok, prompt) + completion)[start - 1:-1]
        expected = torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
        error = max(error, float((logp[i, :len(completion)] - expected).abs().max()))
    return error


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behavior_logp_is_log_softmax_of_scaled_logits(model_and_tok, temperature):
    model, tok = model_and_tok
    assert behavior_logp_error(biased(model_and_tok, eos=1.0), tok, temperature) < 1e-4


def test_the_logp_check_catches_inconsistent_positions(model_and_tok, monkeypatch):
    # A classic bug: the prompt skips its left padding but the cached decoding steps count it (or the reverse).
    # RoPE only sees position differences, so the shift must differ between prompt and new tokens to matter;
    # the comparison above has to catch it.
    correct, calls = positions, []

    def counts_padding_after_the_prompt(mask):
        calls.append(1)
        return correct(mask) if len(calls) == 1 else torch.arange(mask.shape[1]).expand(mask.shape)

    monkeypatch.setattr(rollout_module, "positions", counts_padding_after_the_prompt)
    model, tok = model_and_tok
    assert behavior_logp_error(biased(model_and_tok, eos=1.0), tok, 1.0) > 1e-2
    assert len(calls) > 1


def test_same_generator_seed_same_samples(model_and_tok):
    model, tok = model_and_tok
    runs = [sample(model, tok, PROMPTS, 10, 1.0, torch.Generator().manual_seed(seed)) for seed in (3, 3, 4)]
    for a, b in zip(runs[0], runs[1]):
        assert torch.equal(a, b)
    assert not torch.equal(runs[0][2], runs[2][2])


def test_decode_drops_eos_and_padding(model_and_tok):
    _, tok = model_and_tok
    ids = torch.tensor([[20, 21, EOS, 0], [22, 23, 24, 25], [EOS, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]]).float()
    assert decode(tok, ids, mask) == [tok.decode([20, 21]), tok.decode([22, 23, 24, 25]), ""]
    assert decode(tok, ids, mask)[0] == "12"  # "0" is chr(48): CHARACTERS index 17, id 19


class LengthTask:
    """Rewards that identify the problem and the completion, to check that rows stay aligned."""

    name = "length"

    def score(self, problem, completion):
        return Score(100.0 * problem["index"] + len(completion), problem["index"] % 2 == 0)


def test_rollout_rows_are_problem_major_and_scored_by_the_task(model_and_tok):
    model, tok = model_and_tok
    policy = biased(model_and_tok, eos=2.0, digits=3.0)
    policy.train()
    task = ArithmeticTask(digits=1)
    problems = [dict(p, index=i) for i, p in enumerate(task.generate(3, seed=0))]
    out = rollout(policy, tok, task, problems, group_size=4, max_new_tokens=6, temperature=1.0,
                  generator=torch.Generator().manual_seed(0), policy_version=7)
    assert policy.training  # the mode is restored
    assert len(out) == 12 and out.policy_version == 7
    assert out.problems == [problems[i // 4] for i in range(12)]
    for row, m, problem in zip(out.prompt_ids.tolist(), out.prompt_mask.tolist(), out.problems):
        assert tok.decode([t for t, k in zip(row, m) if k]) == problem["prompt"]
    assert out.completions == decode(tok, out.response_ids, out.response_mask)
    scores = [task.score(p, c) for p, c in zip(out.problems, out.completions)]
    assert out.rewards.tolist() == pytest.approx([s.reward for s in scores])
    assert out.correct.tolist() == [s.correct for s in scores]
    assert out.rewards.dtype == torch.float32 and out.correct.dtype == torch.bool
    assert 0.1 in [round(r, 6) for r in out.rewards.tolist()]  # some completions parse as a number
    assert len(set(out.completions)) > 4  # the group samples differ
    assert all(t.device.type == "cpu" for t in (out.prompt_ids, out.response_ids, out.behavior_logp))

    out = rollout(policy, tok, LengthTask(), problems, group_size=4, max_new_tokens=6, temperature=1.0,
                  generator=torch.Generator().manual_seed(0), policy_version=0)
    expected = [100.0 * (i // 4) + len(c) for i, c in enumerate(out.completions)]
    assert out.rewards.tolist() == expected


def fake_rollout(n=6, width=5):
    rows_ = torch.arange(n)[:, None]
    return Rollout(
        prompt_ids=rows_.expand(n, 3).clone(), prompt_mask=torch.ones(n, 3, dtype=torch.long),
        response_ids=(100 + rows_).expand(n, width).clone(), response_mask=(rows_ % 2).float().expand(n, width).clone(),
        behavior_logp=-rows_.float().expand(n, width) / 10, rewards=rows_[:, 0].float() * 2, correct=rows_[:, 0] > 2,
        completions=[f"c{i}" for i in range(n)], problems=[{"prompt": f"p{i}", "answer": str(i)} for i in range(n)],
        policy_version=5)


@pytest.mark.parametrize("rows_, expected", [(torch.tensor([4, 0, 2]), [4, 0, 2]), (slice(1, 4), [1, 2, 3]),
                                              (torch.tensor([False, True, False, False, True, True]), [1, 4, 5]),
                                              (slice(None, None, 2), [0, 2, 4])])
def test_select_keeps_fields_aligned(rows_, expected):
    full = fake_rollout()
    part = full.select(rows_)
    assert len(part) == len(expected) and part.policy_version == 5
    assert part.prompt_ids[:, 0].tolist() == expected
    assert part.response_ids[:, 0].tolist() == [100 + i for i in expected]
    assert part.response_mask[:, 0].tolist() == [float(i % 2) for i in expected]
    assert part.behavior_logp[:, 0].tolist() == pytest.approx([-i / 10 for i in expected])
    assert part.rewards.tolist() == [2.0 * i for i in expected]
    assert part.correct.tolist() == [i > 2 for i in expected]
    assert part.completions == [f"c{i}" for i in expected]
    assert [p["answer"] for p in part.problems] == [str(i) for i in expected]
    assert part.prompt_mask.shape == (len(expected), 3) and part.response_ids.shape == (len(expected), 5)
