"""Lesson 1's words: two clocks (TTFT and ITL). The view is lessons.two_clocks."""

from __future__ import annotations

from engine.calc.gpu_scaling import H100, LLAMA_3_8B, decode_step, step_floor_ms
from lessons.teaching import InstructorNotes, check_takeaway
from widgets.content import Choice, MeasuredQuestion, PredictionQuestion, Question

# Quiz 2's magnitude: one decoder and eleven, Llama-3-8B in bf16 with 1,000 tokens cached, at
# the H100's datasheet floors (engine.calc.gpu_scaling: max(bytes / bandwidth, FLOPs / peak)).
GPU_MODEL = LLAMA_3_8B
GPU_CONTEXT = 1000
ONE_MS, ELEVEN_MS = (step_floor_ms(decode_step(GPU_MODEL, b, GPU_CONTEXT), H100) for b in (1, 11))

INTRO = """
<p>Watch a chatbot answer and you meet two different waits. First a silence: nothing happens.
Then the words come at a steady beat. They are two clocks, driven by two different kinds of
work, and a busy server can slow one far more than the other.</p>
<p>Send a prompt to the tiny model below. It runs on this machine, in the engine's own worker
process, and every number on this page is measured while it answers you. The model is small and
was trained here on Python's documentation and a few public-domain books, so expect
documentation-flavoured sentences rather than a conversation: what matters is when its tokens
arrive.</p>
"""

PROSE = """
<h2>The silence is prefill</h2>
<p>Before the model can write anything it has to read your whole prompt. It reads all of the
prompt's tokens in one pass, in which every weight multiplies every prompt token: large matrix
multiplications. For a long prompt that is <em>compute-bound</em> work, paced by the arithmetic
(a short prompt on a GPU is still memory-bound: reading the weights takes longer than the sums,
see the box below). The time from your request's arrival to its first token is the
<a href="app?page=vocabulary#ttft">TTFT</a>, time to first token: the time spent waiting for a
turn (queue) plus that prefill pass. Slide the document length up and the silence grows, while
the beat after it hardly changes.</p>

<h2>The beat is decode</h2>
<p>After the first token the model writes one token per step. A step produces just one new token
for each request in it, yet it has to read every weight of the model to do so: little
arithmetic, a lot of memory traffic. For a model larger than the processor's caches, as every
model worth serving is, the weights come from memory at every step (<em>memory-bound</em> work;
<a href="app?lesson=knob">lesson 4</a> measures such a model). The tiny model here is an
exception: its 22 MB of weights can stay in a server CPU's last-level cache (tens of MB), so its
steps are paced by their fixed costs, the many small operations and the Python between them (<em>overhead-bound</em>, see
the box). The gap between two tokens of one answer is the
<a href="app?page=vocabulary#itl">ITL</a>, inter-token latency. Add background requests: they
share every step with yours, each step has more to do (their arithmetic, and each one's own
cached keys and values to read), and your gaps widen. On a GPU the widening from a few more
decoders is small (see the quiz); what moves the clocks most is newcomers' prefills, which
lengthen the steps they join and, with the queue, the silence of anyone who arrives with them
(<a href="app?lesson=chunked-prefill">lesson 7</a>).</p>

<h2>One formula ties the clocks together</h2>
<p>An answer of N tokens has N &minus; 1 gaps after its first token, so the whole answer takes
E2E = TTFT + (N &minus; 1) &times; TPOT, where <a href="app?page=vocabulary#tpot">TPOT</a> is the
average of those gaps. Seen by one reader, 1000 / TPOT in milliseconds is their reading speed in
tokens per second (the <a href="app?page=vocabulary#per-user-speed">per-user speed</a>). It is
worked out from TPOT, the average gap, rather than from the median gap, so that a stall in the
middle of an answer counts.</p>

<h2>Streamed or not</h2>
<p>Untick <em>Stream the answer</em> and the server holds the tokens back until the answer is
complete, as an API call that returns one JSON object does. The engine does the same work, but
now you feel only the end-to-end time: the whole answer lands at once. An agent waiting for a
complete answer lives on E2E alone.</p>

<h2>Two clocks, two places</h2>
<p>The engine stamps each token the moment its step finishes. Your browser stamps the same token
when it has drawn it on your screen. The difference is everything outside the model: your click
travelling to the server, waiting for the engine worker (other readers' jobs run first; with
background load your request also starts after the background requests' head start), the
tokens travelling back, and the drawing. Servers report the first clock, often as
"inference time"; people live on the second, the end-to-end time.</p>
"""

# What a static copy (lessons.export) shows in place of the browser's readouts: nobody streamed
# the recorded answer to the reader's browser, so its clock has nothing to time.
PHASES = """
<h3>Where your request's time went</h3>
<p>Every request you send adds a bar: its time from reaching the engine to its answer's text
being ready, split into its phases. <strong>Tokenize</strong> is the tokenizer turning your text
(and the document before it) into token ids; <strong>queue</strong> the wait for a turn;
<strong>prefill</strong> the steps that read your prompt; <strong>decode</strong> the steps that
wrote your tokens; <strong>detokenize</strong> the tokenizer turning each new id back into text;
<strong>between steps</strong> the engine's own bookkeeping. The engine stamps each phase as it
happens, and the table gives every phase's share.</p>
<p>Here the tokenizer's share is small, because this CPU's prefill and decode are slow. The
tokenizer runs on the server's CPU whatever does the model's work, so on a GPU, where prefill and
decode are much faster, the same tokenize time is a larger share of a shorter bar; a long prompt
costs tokenizer time in proportion to its length before the model sees a single token. That is
why a serving benchmark measures from the request's text, not from its token ids: leave the
tokenizer out and part of the latency users feel is missing. Send a short prompt, then one with a
long document before it, and compare the two bars' tokenize and prefill.</p>
"""

NO_BROWSER_CLOCK = """
<p class="static-note">In the live app this clock runs in your browser: it stamps each token
when your screen draws it, and shows when the first and the last token reached you after your
click, how much of the wait happened outside the engine (the web server, the network, your
browser), and how late each token was delivered. This is a static copy: the answer above was
recorded on the engine's clock when the page was exported, and no server streams it to your
browser, so there is nothing for your browser's clock to time and the chart's
"your browser" row stays empty. Open the lesson in the live app (<code>panel serve app.py</code>)
to see both clocks.</p>
"""

OBJECTIVES = (
    "tell the wait for the first token (TTFT) from the gaps between the tokens after it "
    "(TPOT, ITL), and say which work sets each",
    "predict which clock a longer prompt moves, and which one more users on the server move",
    "work out an answer's whole time from TTFT, TPOT and its number of tokens",
)

PREDICTION = PredictionQuestion(
    "Your answer will have about 48 tokens. Which will be longer: the wait for the first token, "
    "or each gap between the tokens after it?",
    ("The wait for the first token", "Each gap after it", "About the same (within 25%)"))

TAKEAWAY = check_takeaway((
    "A streamed answer has two clocks: the wait for the first token (TTFT), then a steady gap "
    "between tokens (TPOT).",
    "TTFT is queueing plus prefill, which reads the whole prompt; each gap is one decode step, "
    "which reads all the weights and is shared with everyone else decoding.",
    "So a longer prompt moves TTFT, more users move the gaps; E2E = TTFT + (N - 1) x TPOT, and "
    "a reader's speed is 1000 / TPOT.",
))

INSTRUCTOR = InstructorNotes(
    minutes=15,
    timing="Each Send is one live run of the reader's own prompt, never cached. Let the class "
           "predict first, then send the default prompt, then move one slider at a time.",
    misconceptions=(
        "\"The model is slow to start because it is loading\": the silence is real work, the "
        "prompt's prefill (and any queue).",
        "\"A long prompt makes every token slower\": it lengthens TTFT; each later step reads "
        "a little more cached context but stays about as long.",
        "\"Per-user speed is the server's tokens per second\": it is 1000 / TPOT for one "
        "reader; the server's total is far higher under load.",
        "\"E2E = TTFT + N x TPOT\": there are N - 1 gaps after the first token.",
        "\"The tokenizer is free\": the phase bars time it; it is small beside this CPU's "
        "prefill, and a larger share where the model runs faster.",
    ),
    prompts=(
        "Which clock matters for a voice assistant? For a code-completion popup? For a batch "
        "job that writes summaries overnight?",
        "Why might your browser's first token come much later than the engine's TTFT on a "
        "classroom network?",
        "If ten classmates press Send together, whose gaps widen, and why does nobody's TTFT "
        "stay the same either?",
        "Send a short prompt, then one with a long document: which phase bar grew, and by "
        "how much did tokenize grow beside prefill?",
    ),
)

QUESTIONS = (
    Question("You paste a long document in front of your question. Which clock moves?",
             (Choice("The wait for the first token grows; the later gaps barely change", True,
                     "Prefill reads every prompt token before the first output token exists, "
                     "so a longer prompt means a longer silence. Each gap after it is one "
                     "decode step, which reads the cached document but does not reread it "
                     "through the model."),
              Choice("The gaps between tokens grow; the first token comes as soon as before",
                     False,
                     "The document is read once, during prefill, before the first token. Try "
                     "it with the slider: the silence grows, the beat stays."),
              Choice("Both grow in proportion, since each step reads the whole prompt again",
                     False,
                     "The KV cache keeps the prompt's keys and values, so a decode step does "
                     "not push the prompt through the model again; only the first clock "
                     "carries the prompt's cost."))),
    Question("Ten other people start chatting on the same server. What happens to the gaps "
             "between your tokens?",
             (Choice("They grow: each decode step now carries their tokens as well as yours",
                     True,
                     "Every step does work for everyone in the batch, so it takes longer and "
                     "your next token waits for it. How much depends on the machine: for "
                     f"{GPU_MODEL.name} with {GPU_CONTEXT:,}-token contexts on an H100 the "
                     f"step's floor goes from {ONE_MS:.2f} to {ELEVEN_MS:.2f} ms "
                     f"(+{100 * (ELEVEN_MS / ONE_MS - 1):.0f}%); the big jumps come when "
                     "newcomers' prompts are prefilled in your steps (lesson 7)."),
              Choice("They shrink: batching makes the server faster for everyone sharing it",
                     False,
                     "Batching raises the server's total tokens per second; each reader's own "
                     "gaps get longer, not shorter."),
              Choice("They stay the same: each user's tokens run on cores of their own", False,
                     "Everyone shares the same steps on the same processor; the "
                     "background-load slider shows the cost."))),
    Question("An agent asks for a whole JSON answer, not streamed. Which number does it feel?",
             (Choice("E2E: nothing reaches it before the last token is done", True,
                     "Without streaming nothing arrives until the last token, so the time to "
                     "the first token is invisible to it."),
              Choice("TTFT: the first token tells it the answer has begun", False,
                     "The first token is held back with the rest: the agent sees nothing "
                     "until the whole answer is done."),
              Choice("TPOT: the pace of the tokens decides when it can parse", False,
                     "It never sees the pace, only the sum of every gap, at the end."))),
    Question("TTFT is 200 ms, the answer has 101 tokens and TPOT is 20 ms. How long is E2E?",
             (Choice("2.20 s", True,
                     "E2E = TTFT + (N - 1) x TPOT = 200 + 100 x 20 = 2,200 ms: 101 tokens have "
                     "100 gaps after the first one."),
              Choice("2.22 s", False,
                     "That is 200 + 101 x 20: it counts 101 gaps, but the first token's time is "
                     "the TTFT, so an answer of N tokens has N - 1 gaps after it."),
              Choice("2.02 s", False,
                     "That is 101 x 20 ms alone: it forgets the 200 ms before the first token "
                     "and counts one gap too many."),
              Choice("2.00 s", False,
                     "That is the 100 gaps alone (100 x 20 ms); the 200 ms of silence before the "
                     "first token comes on top."))),
    Question("Your browser saw the first token later than the engine's TTFT. Why?",
             (Choice("Travel, a wait for the engine worker, and drawing came on top", True,
                     "The engine's clock starts when your request reaches it and stops when "
                     "the step ends; your click's trip, the wait for the engine worker, the "
                     "trip back and the drawing all come on top."),
              Choice("The browser's clock ticks more slowly than the server's clock", False,
                     "Both tick at the same rate; they start at different moments and stop at "
                     "different places."),
              Choice("The engine reports its times before the step has really ended", False,
                     "The engine reads its clock after each step has finished (on a GPU, "
                     "after waiting for it); the difference is real time spent outside it."))),
    MeasuredQuestion("e2e", "Send a prompt above: a question on your own run appears here."),
)
