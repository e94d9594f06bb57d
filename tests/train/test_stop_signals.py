"""handling_stop_signals: the run's handler while the block runs, the program's own handler gets the signal after."""

from __future__ import annotations

import signal

import pytest

from sopt.train.stop_signals import handling_stop_signals


@pytest.fixture
def program_handler(own_sigterm):
    """A Python SIGTERM handler of the program's own, recording what reaches it."""
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    yield got
    signal.signal(signal.SIGTERM, previous)


def test_a_signal_goes_to_the_block_then_once_to_the_programs_handler(program_handler):
    seen: list[int] = []
    with handling_stop_signals(lambda s, f: seen.append(s)) as received:
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)
        assert program_handler == []          # not while the run handles it
    assert seen == [signal.SIGTERM, signal.SIGTERM] and received == seen
    assert program_handler == [signal.SIGTERM]   # handed on once, after the block
    assert signal.getsignal(signal.SIGTERM) is not None and callable(signal.getsignal(signal.SIGTERM))


def test_nothing_is_handed_on_to_the_default_handlers(own_sigterm):
    # own_sigterm leaves SIG_DFL beneath: re-raising it would kill this process
    with handling_stop_signals(lambda s, f: None) as received:
        signal.raise_signal(signal.SIGTERM)
    assert received == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_no_signal_means_nothing_handed_on(program_handler):
    with handling_stop_signals(lambda s, f: None) as received:
        pass
    assert received == [] and program_handler == []
