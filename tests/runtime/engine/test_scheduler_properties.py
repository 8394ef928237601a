"""A hypothesis state machine drives the block manager and the scheduler with random submissions (prompts that share
prefixes, so the cache is hit), steps, cancellations (between steps and between schedule and update), pool sizes,
budgets and context limits, over a simulated KV cache:

- every step writes each scheduled token's KV into its slot; the "model" reads a sampled row's whole context back
  from the KV through the block table and must find exactly the sequence's tokens, then samples a token that
  depends on that context, so a request's output is fixed by its prompt alone: batching, chunking, preemption and
  recomputation must not change it (checked against the request run by itself);
- no block is leaked or freed twice, reference counts equal the live tables holding each block, only cached full
  blocks are shared, and every cached block's KV holds the tokens its hash chain names;
- each step: at most max_batch_tokens tokens and parallel sequences, a sequence's rows are its next
  uncomputed positions with slots from its own table, every slot lies in a block the sequence holds alone and is
  written once, logits rows are exactly the rows that reach the end of a sequence's tokens, every running sequence
  not preempted gets a token, and a step is empty only when nothing is left;
- drafts (speculation): before a step, decoding sequences get draft tokens, some of them the tokens the model
  will produce and then wrong ones; the scheduler carries them after the last token (never past the budget, the
  context or max_tokens, never preempting), every draft row is sampled, the verified run is kept greedily, and
  the rejected positions are rolled back: outputs still equal the request run alone, and only blocks of verified
  tokens are ever cached (the cached-KV check above);
- at the end every request has finished (with the reason its own run gives) or was refused at add with a reason,
  and the pool holds nothing but free (possibly cached) blocks.
"""

from __future__ import annotations

import hashlib

import numpy as np
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from localllm.engine import BlockManager, FinishReason, Scheduler, Sequence, SequenceStatus
from localllm.sampling import SamplingParams

EOS = 0
PREFIXES = [(), (1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 4, 9, 9), (5,) * 10, (1, 2, 3, 4, 5, 6, 7, 8, 2, 2, 2)]


def model_token(salt: int, context) -> int:
    """The sampled token after `context`: one of 0..7 (0 is EOS), a function of the whole context."""
    h = hashlib.blake2b(np.asarray(context, dtype=np.int64).tobytes(), digest_size=4, salt=salt.to_bytes(2, "little"))
    return int.from_bytes(h.digest(), "little") % 8


def run_alone(prompt, salt, params: SamplingParams, max_len: int):
    """What the request generates by itself: (generated tokens, finish reason)."""
    toks = list(prompt)
    while True:
        t = model_token(salt, toks)
        toks.append(t)
        if t == EOS and not params.ignore_eos:
            return toks[len(prompt) :], FinishReason.STOP
        if params.max_tokens is not None and len(toks) - len(prompt) >= params.max_tokens:
            return toks[len(prompt) :], FinishReason.LENGTH
        if len(toks) >= max_len:
            return toks[len(prompt) :], FinishReason.CONTEXT


class EngineMachine(RuleBasedStateMachine):
    @initialize(
        n_blocks=st.integers(2, 12),
        block_size=st.sampled_from([1, 2, 3, 4]),
        parallel=st.integers(1, 4),
        extra_budget=st.integers(0, 10),
        ctx_size=st.none() | st.integers(2, 40),
    )
    def setup(self, n_blocks, block_size, parallel, extra_budget, ctx_size):
        self.bm = BlockManager(n_blocks, block_size)
        self.sched = Scheduler(self.bm, parallel, parallel + extra_budget, ctx_size)
        self.bs = block_size
        self.pool = n_blocks * block_size
        self.max_len = min(ctx_size or self.pool, self.pool)
        self.budget = parallel + extra_budget
        self.kv: dict[int, int] = {}  # flat slot -> token whose KV was written there
        self.seqs: dict[int, Sequence] = {}  # every accepted request
        self.salt: dict[int, int] = {}
        self.refused = 0
        self.keys: dict[int, list[bytes]] = {}  # seq -> the block manager's keys of its computed full blocks
        self.prefix_of: dict[bytes, tuple[int, ...]] = {}  # key -> the tokens it names
        self.at_preemption: dict[int, list[int]] = {}  # preempted seq -> its tokens when it was preempted
        self.queue: list[int] = []  # the waiting order the policy promises: preempted first, then by arrival
        self.next_id = 0

    # --- rules

    @rule(
        prefix=st.sampled_from(PREFIXES),
        tail=st.lists(st.integers(1, 5), max_size=8),
        salt=st.integers(0, 2**16 - 1),
        max_tokens=st.none() | st.integers(1, 12),
        ignore_eos=st.booleans(),
    )
    def submit(self, prefix, tail, salt, max_tokens, ignore_eos):
        prompt = list(prefix) + tail or [1]
        seq_id, self.next_id = self.next_id, self.next_id + 1
        seq = Sequence(seq_id, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos), [EOS])
        try:
            self.sched.add(seq)
        except ValueError as e:
            assert len(prompt) >= self.max_len, f"refused a request that fits: {e}"
            assert f"{len(prompt)} tokens" in str(e)
            assert seq.status is SequenceStatus.WAITING and seq.arrival == -1
            self.refused += 1
            event("a request was refused")
            return
        assert len(prompt) < self.max_len, "accepted a request that can never generate a token"
        self.seqs[seq_id] = seq
        self.salt[seq_id] = salt
        self.queue.append(seq_id)

    @rule(
        abort_row=st.none() | st.integers(0, 3),
        drafts=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=4),
    )
    def step(self, abort_row, drafts):
        self.run_step(abort_row, drafts)

    @rule(pick=st.integers(0, 2**16))
    def abort(self, pick):
        live = sorted(i for i, s in self.seqs.items() if not s.is_finished)
        if not live:
            assert not self.sched.abort(pick + self.next_id), "aborted an unknown sequence"
            return
        seq_id = live[pick % len(live)]
        assert self.sched.abort(seq_id)
        if seq_id in self.queue:
            self.queue.remove(seq_id)
        assert self.seqs[seq_id].finish_reason is FinishReason.ABORT
        assert not self.sched.abort(seq_id)

    # --- one step over the simulated KV

    def propose(self, drafts) -> dict[int, list[int]]:
        """Draft tokens for the decoding sequences, in order: (k, right) gives k drafts whose first `right` are
        the tokens the model will produce."""
        given = {}
        decoding = [
            s
            for s in self.seqs.values()
            if s.status is SequenceStatus.RUNNING and s.num_tokens - s.num_computed_tokens == 1
        ]
        for seq, (k, right) in zip(decoding, drafts):
            toks = list(seq.token_ids)
            for i in range(k):
                t = model_token(self.salt[seq.seq_id], toks)
                toks.append(t if i < right else (t + 1) % 8)
            seq.draft_token_ids = given[seq.seq_id] = toks[seq.num_tokens :]
            if k:
                event("drafts were proposed")
        return given

    def run_step(self, abort_row=None, drafts=()):
        given = self.propose(drafts)
        before = {i: (s.status, s.num_computed_tokens) for i, s in self.seqs.items()}
        running = {i for i, (st_, _) in before.items() if st_ is SequenceStatus.RUNNING}
        out = self.sched.schedule()
        if self.sched.has_unfinished or running:
            assert out.num_tokens > 0, "a step with work left scheduled nothing"
        self.check_output(out, before, running, given)

        for slot, tok in zip(out.batch.slot_mapping.tolist(), out.batch.token_ids.tolist()):
            self.kv[slot] = tok
        sampled = []
        index: dict[int, int] = {}  # s -> rows of s sampled so far; -1 once its run ended
        for row, s in zip(out.batch.logits_rows.tolist(), out.sampled_seqs):
            seq, p, i = out.seqs[s], int(out.batch.positions[row]), index.get(s, 0)
            if i < 0:
                sampled.append(None)
                continue
            drafts = given.get(seq.seq_id, [])[: out.num_drafts[s]]
            table = out.batch.block_tables[s]
            context = [self.kv[int(table[q // self.bs]) * self.bs + q % self.bs] for q in range(p + 1)]
            assert context == (seq.token_ids + drafts)[: p + 1], "a sampled row reads KV that is not its own tokens"
            tok = model_token(self.salt[seq.seq_id], context)
            sampled.append(tok)
            if i < len(drafts) and tok == drafts[i]:  # greedy verification: the run goes on
                index[s] = i + 1
                event("a draft was accepted")
            else:
                index[s] = -1

        aborted = None
        if abort_row is not None and out.seqs:
            aborted = out.seqs[abort_row % len(out.seqs)]
            assert self.sched.abort(aborted.seq_id)
            event("a sequence was aborted between schedule and update")
        advanced = self.sched.update(out, sampled)
        assert aborted not in advanced
        assert [out.seqs[s] for s in dict.fromkeys(out.sampled_seqs) if out.seqs[s] is not aborted] == advanced
        for seq in out.seqs:
            self.learn_keys(seq)
            if seq.is_finished and seq.finish_reason is not FinishReason.ABORT:
                want = run_alone(
                    seq.token_ids[: seq.num_prompt_tokens], self.salt[seq.seq_id], seq.params, self.max_len
                )
                assert (seq.generated_token_ids, seq.finish_reason) == want

    def check_output(self, out, before, running, given):
        assert out.num_tokens <= self.budget and len(out.seqs) <= self.sched.parallel
        assert len({s.seq_id for s in out.seqs}) == len(out.seqs)
        assert all(n >= 1 for n in out.num_scheduled)
        preempted = {s.seq_id for s in out.preempted}
        for s in out.preempted:
            assert s.status is SequenceStatus.PREEMPTED and s.num_computed_tokens == 0
            assert before[s.seq_id][0] is SequenceStatus.RUNNING
            self.at_preemption[s.seq_id] = list(s.token_ids)
            event("a sequence was preempted")
        assert running - preempted <= {s.seq_id for s in out.seqs}, "a running sequence missed a step"
        if preempted:
            assert all(s.seq_id in running for s in out.seqs), "admitted a sequence in a step that preempted"
        for s in out.preempted:  # newest first, each to the front: the oldest ends up at the head
            self.queue.insert(0, s.seq_id)
        admitted = [s.seq_id for s in out.seqs if s.seq_id not in running]
        assert admitted == self.queue[: len(admitted)], "admitted out of order"
        del self.queue[: len(admitted)]

        assert not any(s.draft_token_ids for s in self.seqs.values()), "drafts outlive their step"
        assert not (preempted and any(out.num_drafts)), "drafts rode in a step that preempted"
        expect_rows, t = [], 0
        for s, (seq, n) in enumerate(zip(out.seqs, out.num_scheduled)):
            assert seq.status is SequenceStatus.RUNNING
            c, k = seq.num_computed_tokens, out.num_drafts[s]
            drafts = given.get(seq.seq_id, [])[:k]
            assert len(drafts) == k and c + n - k <= seq.num_tokens
            if k:
                assert seq.seq_id in running and n == k + 1 and c + 1 == seq.num_tokens
                assert seq.num_tokens + k < self.max_len, "drafts past the context"
                if seq.max_tokens is not None:
                    assert seq.num_generated_tokens + k < seq.max_tokens, "drafts past max_tokens"
                event("drafts rode in a step")
            if seq.seq_id in running:
                assert c == before[seq.seq_id][1]
            else:  # admitted now: it starts after its cached prefix of full blocks
                assert c % self.bs == 0 and before[seq.seq_id][1] == 0
                if seq.seq_id in self.at_preemption:  # readmitted: recomputes prompt + generated, nothing else
                    assert seq.token_ids == self.at_preemption.pop(seq.seq_id)
                    event("a preempted sequence was recomputed")
                if c:
                    event("a prefix cache hit")
            table = self.bm.block_table(seq.seq_id).block_ids
            row = out.batch.block_tables[s].tolist()
            assert row[: len(table)] == list(table) and all(b == -1 for b in row[len(table) :])
            assert out.batch.context_lens[s] == c + n
            assert out.batch.positions[t : t + n].tolist() == list(range(c, c + n))
            assert out.batch.token_ids[t : t + n].tolist() == seq.token_ids[c : c + n - k] + drafts
            assert out.batch.seq_index[t : t + n].tolist() == [s] * n
            slots = out.batch.slot_mapping[t : t + n].tolist()
            assert slots == [table[p // self.bs] * self.bs + p % self.bs for p in range(c, c + n)]
            for slot in slots:
                assert self.bm._ref[slot // self.bs] == 1, "a step writes a block another sequence holds"
            if c + n - k == seq.num_tokens:
                expect_rows += [(r, s) for r in range(t + n - k - 1, t + n)]
            else:
                event("a prompt was chunked")
            t += n
        assert t == out.num_tokens
        assert len(set(out.batch.slot_mapping.tolist())) == out.num_tokens, "a slot is written twice in one step"
        assert list(zip(out.batch.logits_rows.tolist(), out.sampled_seqs)) == expect_rows

    def learn_keys(self, seq):
        keys = self.keys.setdefault(seq.seq_id, [])
        self.bm._extend_keys(keys, seq.token_ids, seq.num_computed_tokens // self.bs)
        for i, key in enumerate(keys):
            prefix = tuple(seq.token_ids[: (i + 1) * self.bs])
            assert self.prefix_of.setdefault(key, prefix) == prefix

    # --- invariants

    @invariant()
    def pool_is_consistent(self):
        if not hasattr(self, "bm"):
            return
        bm = self.bm
        running = [s for s in self.seqs.values() if s.status is SequenceStatus.RUNNING]
        assert len(running) == self.sched.num_running <= self.sched.parallel
        assert set(bm._seqs) == {s.seq_id for s in running}, "only running sequences hold blocks"
        waiting = [s for s in self.seqs.values() if s.status in (SequenceStatus.WAITING, SequenceStatus.PREEMPTED)]
        assert len(waiting) == self.sched.num_waiting
        assert all(s.num_computed_tokens == 0 for s in waiting)
        held: dict[int, int] = {}
        for s in running:
            table = bm.block_table(s.seq_id)
            assert len(table.block_ids) == len(set(table.block_ids)) == bm.blocks_needed(table.num_slots)
            assert s.num_computed_tokens < s.num_tokens <= table.num_slots + 1
            for b in table.block_ids:
                held[b] = held.get(b, 0) + 1
        free = list(bm._free)
        assert len(free) == len(set(free)) == bm.num_free_blocks, "a block is freed twice"
        assert not set(free) & set(held), "a block is both free and held"
        assert set(free) | set(held) == set(range(bm.n_blocks)), "a block leaked"
        assert [bm._ref[b] for b in range(bm.n_blocks)] == [held.get(b, 0) for b in range(bm.n_blocks)]
        for b, n in held.items():
            assert n == 1 or bm._key[b] is not None, "only cached full blocks are shared"
        for key, b in bm._cached.items():
            assert bm._key[b] == key
            tokens = [self.kv.get(b * self.bs + o) for o in range(self.bs)]
            assert tokens == list(self.prefix_of[key][-self.bs :]), "a cached block's KV does not match its key"

    def teardown(self):
        if not hasattr(self, "bm"):
            return
        for i in range(3_000):
            if not self.sched.has_unfinished:
                break
            self.run_step(drafts=[(i % 5, i % 3), (2, 2), (4, 1), (1, 0)])  # drafts kept, cut short, rejected
            self.pool_is_consistent()
        assert not self.sched.has_unfinished, "requests never finished"
        assert all(s.is_finished and s.finish_reason is not None for s in self.seqs.values())
        assert self.sched.num_running == self.sched.num_waiting == 0
        assert all(r == 0 for r in self.bm._ref) and self.bm.num_free_blocks == self.bm.n_blocks
        self.pool_is_consistent()


EngineMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate, Phase.shrink],  # no explain phase: it traces every line, for minutes
)
test_engine_state_machine = EngineMachine.TestCase
