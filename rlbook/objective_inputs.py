"""Input checks of the objectives: a bad tensor or hyper-parameter is a ValueError naming it.

Input checks of the objectives (rlbook.objectives): every bad tensor or hyper-parameter is a ValueError that
names the value and the valid choices, raised before anything is computed."""
import inspect

import torch

PARAM_RULES = {  # hyper-parameter: (valid, what valid is)
    "eps_low": (lambda v: v >= 0, ">= 0"),
    "eps_high": (lambda v: v >= 0, ">= 0"),
    "tau": (lambda v: v > 0, "> 0"),
    "tis_cap": (lambda v: v > 0, "> 0"),
    "dual_clip": (lambda v: v > 1, "> 1 (or None for no dual clip)"),
}


def keyword_params(objective):
    """An objective's hyper-parameters (and per-token tensors such as prox_logp): its keyword-only parameters."""
    return [p for p in inspect.signature(objective).parameters.values() if p.kind is p.KEYWORD_ONLY]


def check_params(name, objective, params):
    """params are hyper-parameters of `objective` with valid values, and every tensor it requires is given."""
    accepted = {p.name: p for p in keyword_params(objective)}
    for key, value in params.items():
        if key not in accepted:
            raise ValueError(f"unknown parameter {key!r} for objective {name!r}; valid parameters: "
                             f"{', '.join(accepted) or 'none'}")
        if key in PARAM_RULES and not (key == "dual_clip" and value is None):
            check_number(key, value, *PARAM_RULES[key])
        if isinstance(accepted[key].default, bool) and not isinstance(value, bool):
            raise ValueError(f"{key}={value!r} is invalid; it must be True or False")
    for key, p in accepted.items():
        if p.default is inspect.Parameter.empty and key not in params:
            raise ValueError(f"objective {name!r} requires {key}=<[B, T] tensor> (log-probs under the policy at "
                             "the start of the training step)")


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_number(name, value, rule, valid):
    """value is a number (not a bool) that satisfies rule."""
    if not (is_number(value) and rule(value)):
        raise ValueError(f"{name}={value!r} is invalid; it must be a number {valid}")


def check_same_shape(tensors):
    """Every value is a tensor of the first one's shape."""
    for key, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{key} must be a torch.Tensor, got {type(value).__name__}")
    (first, reference), *others = tensors.items()
    for key, value in others:
        if value.shape != reference.shape:
            raise ValueError(f"shape mismatch: {key} has shape {tuple(value.shape)} but {first} has shape "
                             f"{tuple(reference.shape)}")


def prepare(tensors, mask):
    """Check [B, T] shapes, a 0/1 mask with at least one response token and finite values on the response
    tokens (one device sync); return the bool response mask and the tensors, upcast to at least float32,
    with every padding position set to 0."""
    check_same_shape({"mask": mask, **tensors})
    if mask.dim() != 2:
        raise ValueError(f"token tensors must be [B, T]; mask has shape {tuple(mask.shape)}")
    resp = mask != 0
    checks = [resp.any(), ((mask == 0) | (mask == 1)).all()]
    checks += [(torch.isfinite(value) | ~resp).all() for value in tensors.values()]
    has_response, binary, *finite = torch.stack(checks).tolist()
    if not has_response:
        raise ValueError("mask has no response token (it must be 1 on at least one token)")
    if not binary:
        raise ValueError("mask must hold only 0 and 1 (or False and True)")
    for key, ok in zip(tensors, finite):
        if not ok:
            raise ValueError(f"{key} has NaN or infinite values on response tokens")
    clean = {}
    for key, value in tensors.items():
        value = value.to(torch.promote_types(value.dtype, torch.float32))
        clean[key] = torch.where(resp, value, torch.zeros((), dtype=value.dtype, device=value.device))
    return resp, clean
