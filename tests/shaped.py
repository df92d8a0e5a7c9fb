"""A real task's problems with a dense reward, for trainer tests on models with random weights.

A model with random weights never solves arithmetic: with all rewards 0 every advantage is 0, the loss is 0 and most
comparisons would hold trivially. The reward here is the share of the completion's characters whose code is
divisible by 3, so every group has a spread of rewards; prompts, sampling, trainer and evaluation stay the real ones.
"""
from rlbook.tasks import Score


class ShapedTask:
    def __init__(self, task):
        self.task, self.name = task, task.name

    def generate(self, n, seed):
        return self.task.generate(n, seed)

    def trace(self, problem):
        return self.task.trace(problem)

    def score(self, problem, completion):
        reward = sum(ord(ch) % 3 == 0 for ch in completion) / 6
        return Score(reward, reward >= 1 / 3)
