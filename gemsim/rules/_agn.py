"""AGN, accumulated gradient normalisation: DOWNPOUR's commit divided by the window.

Hermans, Spanakis & Möckel 2017, https://arxiv.org/abs/1710.02368. The worker
takes ``window`` local SGD steps from the central variable it pulled; the
server adds the accumulated displacement divided by ``window``, so a commit
moves the central variable by about one averaged step whatever the window.
"""

from gemsim.rules import _base
from gemsim.rules._downpour import displacement_rule


def agn(lr: float, window: int) -> _base.Rule:
    """Accumulated gradient normalisation.

    Args:
      lr: local learning rate; > 0.
      window: local steps per commit, and the divisor of the commit; integer >= 1.

    Returns:
      The rule; no worker or server state, info :class:`~gemsim.rules.CommitInfo`
      with weight 1.

    Raises:
      ValueError: a hyperparameter out of range, naming it and what is allowed.
    """
    lr = _base.check_positive("agn: lr", lr)
    window = _base.check_int("agn: window", window, 1)
    return displacement_rule("agn", lr, window, 0.0, window)
