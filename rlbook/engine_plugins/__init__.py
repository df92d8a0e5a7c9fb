"""rlbook's objectives inside other engines, where an engine has a place for them.

  verl_losses  M2PO (Algorithm 1 and the released code's cap) and Advantage Reweighting registered in verl's policy-loss
               registry; an export to verl names them (rlbook.export.verl)
  trl_m2po     M2POTrainer: TRL's GRPOTrainer with M2PO's Algorithm 1 mask, refusing the settings where the mask would
               not be Algorithm 1's

Each module imports its engine; each is checked on rlbook's toy batch against rlbook's own objective
(tests/test_engine_verl.py, tests/test_engine_trl.py).
"""
