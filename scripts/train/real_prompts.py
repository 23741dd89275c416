"""Prompt sets for training and evaluating the EAGLE head of the real target (issue 7), written by us.

* `train_conversations(n, seed)`: n deterministic, diverse conversations built from task templates x subjects
  (explanations, how-tos, writing, code, arithmetic word problems, comparisons, lists, rewriting, advice, trivia,
  role play...). About a third get a follow-up turn (answered by the target conditioned on its own first answer).
* `EVAL_PROMPTS`: the held-out evaluation set (hand-written; none of its subjects or phrasings is in the training
  templates, checked by `check_disjoint`). `python scripts/train/real_prompts.py --write-eval FILE` writes it as
  MT-bench style JSONL (`{"question_id", "turns": [...]}`) for `eagle-convert bench --prompts FILE`.
"""

from __future__ import annotations

import argparse
import json
import random

# ----------------------------------------------------------------------------------------------------------- training
SUBJECTS_SCIENCE = [
    "photosynthesis", "black holes", "the water cycle", "plate tectonics", "vaccines", "the immune system",
    "electricity", "magnetism", "gravity", "the speed of light", "DNA", "evolution", "climate change", "volcanoes",
    "earthquakes", "the moon's phases", "tides", "rainbows", "the greenhouse effect", "nuclear fusion", "atoms",
    "chemical reactions", "the periodic table", "sound waves", "friction", "the human heart", "the brain", "sleep",
    "bacteria", "viruses", "the solar system", "stars", "comets", "the ozone layer", "ocean currents", "clouds",
    "lightning", "batteries", "solar panels", "wind turbines", "antibiotics", "digestion", "muscles", "bones",
    "the nervous system", "enzymes", "cells", "fossils", "glaciers", "deserts", "rainforests", "coral reefs",
]
SUBJECTS_TECH = [
    "the internet", "computers", "smartphones", "artificial intelligence", "machine learning", "databases",
    "encryption", "passwords", "cloud computing", "open source software", "operating systems", "email",
    "search engines", "video games", "robots", "3D printing", "GPS", "Wi-Fi", "social media", "programming",
    "spreadsheets", "web browsers", "computer viruses", "binary numbers", "algorithms", "electric cars",
    "drones", "virtual reality", "blockchain", "compilers", "version control", "unit testing", "APIs",
]
SUBJECTS_LIFE = [
    "learning a new language", "saving money", "cooking at home", "exercising regularly", "drinking enough water",
    "reading books", "time management", "public speaking", "making friends", "gardening", "keeping a journal",
    "meditation", "studying for exams", "job interviews", "working from home", "recycling", "traveling on a budget",
    "adopting a pet", "learning to swim", "playing chess", "learning the guitar", "painting", "hiking",
    "riding a bicycle", "writing a resume", "starting a small business", "volunteering", "moving to a new city",
    "organizing a closet", "planning a birthday party", "baking bread", "taking photos", "camping",
    "running a marathon",
    "eating vegetables", "reducing stress", "waking up early", "learning to code", "teamwork", "giving feedback",
]
SUBJECTS_HISTORY = [
    "the Roman Empire", "ancient Egypt", "the printing press", "the Industrial Revolution", "the Renaissance",
    "the Silk Road", "the first airplane flight", "the invention of the telephone", "the Olympic Games",
    "the Great Wall of China", "the pyramids", "the Vikings", "the moon landing", "the steam engine",
    "ancient Greece", "the history of money", "the history of writing", "the invention of paper", "castles",
    "the history of medicine", "the telescope", "the compass", "the history of chocolate", "the history of tea",
]
SUBJECTS_THINGS = [
    "cats", "dogs", "elephants", "bees", "owls", "penguins", "dolphins", "trees", "the ocean", "mountains", "rivers",
    "autumn", "winter", "spring", "summer", "the city at night", "a rainy day", "a lighthouse", "a train journey",
    "an old library", "a small village", "friendship", "courage", "kindness", "home", "music", "coffee", "bicycles",
    "the sea", "the stars", "a garden", "a forest", "snow", "the desert", "a market", "a storm", "the morning",
]
ALL_SUBJECTS = SUBJECTS_SCIENCE + SUBJECTS_TECH + SUBJECTS_HISTORY

EXPLAIN = [
    "Explain {s} in simple terms.", "What is {s}?", "How does {s} work?", "Explain {s} to a ten-year-old.",
    "Give me a short overview of {s}.", "Why is {s} important?", "What are the most common misconceptions about {s}?",
    "Write a short paragraph about {s}.", "Tell me three interesting facts about {s}.", "Describe {s} in detail.",
    "What should everyone know about {s}?", "Summarize the key ideas behind {s}.",
    "Can you explain {s} step by step?", "List five key terms related to {s} and define each one.",
    "Write a short quiz with three questions about {s}, with answers.",
    "What are the advantages and disadvantages of {s}?",
]
HOWTO = [
    "How do I get started with {s}?", "Give me some tips for {s}.", "What are the benefits of {s}?",
    "Write a step-by-step guide to {s}.", "What mistakes should beginners avoid when {s}?",
    "Make a one-week plan for {s}.", "I find {s} hard. Any advice?", "List five practical tips for {s}.",
    "Why do people struggle with {s}, and how can they improve?", "What is the best way to get better at {s}?",
]
WRITE = [
    "Write a short poem about {s}.", "Write a haiku about {s}.", "Write a short story about {s}.",
    "Write a limerick about {s}.", "Describe {s} using vivid imagery.", "Write a children's story about {s}.",
    "Write a diary entry about {s}.", "Write a song verse about {s}.",
    "Write a short description of {s} for a travel brochure.",
    "Write the opening paragraph of a novel about {s}.", "Write a motivational message inspired by {s}.",
]
COMPARE = [
    "Compare {a} and {b}.", "What is the difference between {a} and {b}?",
    "Which is more interesting, {a} or {b}? Explain.",
    "How are {a} and {b} similar?", "Write a short dialogue between two friends arguing about {a} versus {b}.",
]
CODE_TASKS = [
    "reverses a string", "checks whether a number is prime", "computes the factorial of n",
    "returns the n-th Fibonacci number", "counts the vowels in a string", "finds the largest number in a list",
    "removes duplicates from a list", "checks whether a word is a palindrome",
    "sorts a list of numbers with bubble sort",
    "converts Celsius to Fahrenheit", "merges two sorted lists", "counts how often each word appears in a text",
    "computes the average of a list", "flattens a nested list", "checks whether two strings are anagrams",
    "finds the greatest common divisor of two numbers", "generates a multiplication table",
    "reads a file and prints its lines",
    "returns the sum of the digits of a number", "implements binary search", "converts a decimal number to binary",
    "capitalizes the first letter of each word", "finds the second largest element in a list",
    "validates an email address",
]
CODE = [
    "Write a Python function that {t}.", "Write a JavaScript function that {t}.",
    "Show me Python code that {t}, with comments.", "How would you write a function that {t}? Explain your code.",
    "Write a Python function that {t} and add a few tests.",
    "Write a C function that {t}.",
]
MATH = [
    "A shop sells apples for {a} dollars each. How much do {b} apples cost?",
    "If a train travels {a} kilometers per hour for {b} hours, how far does it go?",
    "Tom has {a} marbles and gives away {b}. How many are left? Explain your reasoning.",
    "What is {a} times {b}? Show your work.", "What is {a} plus {b} minus 7?",
    "A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?",
    "There are {a} students and each bus holds {b}. How many buses are needed?",
    "Sara reads {b} pages a day. How many days does she need for a {a}-page book?",
    "What is {b} percent of {a}?", "Solve for x: {b}x + {a} = {c}.",
    "A recipe needs {b} eggs for {c} people. How many eggs for {a} people?",
]
REWRITE_TEXTS = [
    "The meeting has been moved to Thursday because the manager is traveling and the room is not available on Monday.",
    "Our team finished the project two weeks early, which saved money and made the customer very happy.",
    "Regular exercise improves mood, helps you sleep better and lowers the risk of many diseases.",
    "The library will close at six tonight for cleaning and will open again tomorrow morning at nine.",
    "I tried the new restaurant downtown; the soup was cold but the staff were friendly and the dessert was great.",
    "Scientists found that bees can recognize human faces by learning patterns of features.",
    "Please remember to bring your own water bottle and a hat, since the hike will take most of the day.",
    "The city plans to add more bike lanes next year to reduce traffic and pollution.",
]
REWRITE = [
    "Rewrite this more formally: {x}", "Summarize in one sentence: {x}", "Make this sound more exciting: {x}",
    "Turn this into a bulleted list: {x}", "Fix the grammar and improve the style: {x}", "Explain this to a child: {x}",
    "Write a polite email based on this note: {x}", "What is the main point of this text? {x}",
]
ROLES = ["a teacher", "a pirate", "a detective", "a chef", "a tour guide", "a scientist", "a coach", "a librarian",
         "a robot", "a farmer", "an astronaut", "a museum guide"]
ROLEPLAY = [
    "Pretend you are {r}. Introduce yourself.", "You are {r}. Give me advice about {s}.",
    "As {r}, describe a typical day.", "Imagine you are {r} explaining {s}. What would you say?",
]
MISC = [
    "Give me ten ideas for a birthday gift for a friend who likes {s}.", "Suggest five names for a blog about {s}.",
    "Write a short email inviting my team to a workshop on {s}.", "Create a simple lesson plan about {s}.",
    "What questions should I ask an expert on {s}?", "Write a tweet about {s}.", "Tell me a fun fact about {s}.",
    "What would happen if {s} disappeared?", "Write a product description for a book about {s}.",
    "Give me a list of books or resources to learn about {s}.", "Write a short FAQ about {s} with four questions.",
]
FOLLOW_UPS = [
    "Can you make that shorter?", "Can you give me an example?", "Explain that in simpler words.",
    "Summarize your answer in one sentence.", "Can you add more details?", "Why is that?",
    "Turn your answer into a bulleted list.", "What is the most important point?", "Thank you! Can you tell me more?",
    "Can you rewrite that for a child?", "What are some common mistakes related to this?",
    "Give me three follow-up questions I could ask.", "Is there anything else I should know?",
]


def _pick(rng: random.Random, items):
    return items[rng.randrange(len(items))]


def _one_prompt(rng: random.Random) -> str:
    kind = rng.choices(
        ["explain", "howto", "write", "compare", "code", "math", "rewrite", "role", "misc"],
        weights=[22, 12, 12, 6, 14, 10, 8, 5, 11])[0]
    if kind == "explain":
        return _pick(rng, EXPLAIN).format(s=_pick(rng, ALL_SUBJECTS))
    if kind == "howto":
        return _pick(rng, HOWTO).format(s=_pick(rng, SUBJECTS_LIFE))
    if kind == "write":
        return _pick(rng, WRITE).format(s=_pick(rng, SUBJECTS_THINGS + SUBJECTS_LIFE[:10]))
    if kind == "compare":
        pool = _pick(rng, [SUBJECTS_SCIENCE, SUBJECTS_TECH, SUBJECTS_THINGS, SUBJECTS_HISTORY])
        a, b = rng.sample(pool, 2)
        return _pick(rng, COMPARE).format(a=a, b=b)
    if kind == "code":
        return _pick(rng, CODE).format(t=_pick(rng, CODE_TASKS))
    if kind == "math":
        a, b = rng.randrange(12, 400), rng.randrange(2, 30)
        return _pick(rng, MATH).format(a=a, b=b, c=a + b * rng.randrange(1, 20))
    if kind == "rewrite":
        return _pick(rng, REWRITE).format(x=_pick(rng, REWRITE_TEXTS))
    if kind == "role":
        return _pick(rng, ROLEPLAY).format(r=_pick(rng, ROLES), s=_pick(rng, ALL_SUBJECTS + SUBJECTS_LIFE))
    return _pick(rng, MISC).format(s=_pick(rng, ALL_SUBJECTS + SUBJECTS_LIFE + SUBJECTS_THINGS))


def train_conversations(n: int, seed: int = 0, follow_up_fraction: float = 0.35) -> list[list[str]]:
    """n distinct conversations, each a list of user turns (1 or 2); deterministic for a seed."""
    rng = random.Random(seed)
    seen, out = set(), []
    while len(out) < n:
        first = _one_prompt(rng)
        if first in seen:
            continue
        seen.add(first)
        turns = [first]
        if rng.random() < follow_up_fraction:
            turns.append(_pick(rng, FOLLOW_UPS))
        out.append(turns)
    return out


# -------------------------------------------------------------------------------------------------------- evaluation
# Held out: subjects and phrasings that the templates above never produce.
EVAL_PROMPTS: list[list[str]] = [
    ["What causes the seasons on Earth?"],
    ["Write a short poem about a paper boat on a puddle."],
    ["How can I become a better listener?"],
    ["Write a Python function that returns the longest word in a sentence."],
    ["Explain how a refrigerator keeps food cold."],
    ["What are some good habits for keeping a tidy desk?"],
    ["Write a short story about a clockmaker who loses her keys."],
    ["Why do leaves change color in the fall?"],
    ["A farmer has 48 chickens and sells a quarter of them. How many chickens does he have left?"],
    ["Give me a recipe for a simple tomato pasta."],
    ["What is the difference between weather and climate?"],
    ["Describe the life cycle of a butterfly."],
    ["Write a thank-you note to a neighbor who watered my plants."],
    ["How do airplanes stay in the air?"],
    ["What are the main parts of a plant and what do they do?"],
    ["Suggest a weekend itinerary for a first visit to Paris."],
    ["Explain what a microwave oven does to food."],
    ["Write a short speech for the opening of a school science fair."],
    ["How do I care for a houseplant that is losing its leaves?", "What if the soil smells bad?"],
    ["What is inflation in economics?", "Give me an everyday example of it."],
]


def check_disjoint() -> None:
    """No evaluation prompt appears in (or is produced by) the training templates."""
    train = {t for conv in train_conversations(6000, seed=0) for t in conv}
    for turns in EVAL_PROMPTS:
        for turn in turns:
            assert turn not in train, f"evaluation prompt leaks into training: {turn!r}"


def write_eval(path: str) -> None:
    with open(path, "w") as f:
        for i, turns in enumerate(EVAL_PROMPTS):
            f.write(json.dumps({"question_id": 7000 + i, "category": "real-eval", "turns": turns}) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write-eval", metavar="FILE", help="write the held-out prompts as MT-bench JSONL")
    parser.add_argument("--show-train", type=int, metavar="N", help="print N training conversations")
    args = parser.parse_args()
    check_disjoint()
    if args.write_eval:
        write_eval(args.write_eval)
    if args.show_train:
        for conv in train_conversations(args.show_train):
            print(" || ".join(conv))
