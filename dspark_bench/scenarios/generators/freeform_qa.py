"""Open questions answered in plain text: the control workload, with no JSON anywhere."""

from __future__ import annotations

import random

from dspark_bench.scenarios.spec import Example, Scenario

# topic -> reference answer. Questions vary by seed; the answer for a topic is fixed.
LANGUAGES = [
    ("Python", "Guido van Rossum", 1991, "readable syntax and a large standard library"),
    ("Rust", "Graydon Hoare", 2010, "memory safety without a garbage collector"),
    ("Go", "Google", 2009, "simple concurrency with goroutines"),
    ("Java", "James Gosling", 1995, "running on the Java virtual machine"),
    ("C", "Dennis Ritchie", 1972, "low-level control close to the hardware"),
    ("JavaScript", "Brendan Eich", 1995, "running inside web browsers"),
    ("Haskell", "a research committee", 1990, "pure functions and lazy evaluation"),
    ("Ruby", "Yukihiro Matsumoto", 1995, "developer happiness and the Rails framework"),
]
PLANETS = [
    ("Mercury", "first", "the smallest planet", "no moons"),
    ("Venus", "second", "the hottest planet", "no moons"),
    ("Mars", "fourth", "the red planet", "two small moons"),
    ("Jupiter", "fifth", "the largest planet", "dozens of moons"),
    ("Saturn", "sixth", "famous for its bright rings", "dozens of moons"),
    ("Neptune", "eighth", "the windiest planet", "sixteen known moons"),
]
CONCEPTS = {
    "photosynthesis": "Photosynthesis is the process plants use to turn sunlight, water and carbon dioxide into sugar. It releases oxygen as a by-product.",
    "a black hole": "A black hole is a region of space where gravity is so strong that not even light can escape. It forms when a massive star collapses.",
    "inflation": "Inflation is the general rise of prices over time. It means each unit of money buys fewer goods and services.",
    "the water cycle": "The water cycle moves water through evaporation, condensation and precipitation. It carries water between the oceans, the air and the land.",
    "a vaccine": "A vaccine trains the immune system to recognise a germ. It helps the body fight the real infection later.",
    "machine learning": "Machine learning lets computers learn patterns from data instead of following fixed rules. It powers search, translation and recommendations.",
    "an earthquake": "An earthquake is a sudden shaking of the ground. It happens when rocks along a fault slip past each other.",
    "compound interest": "Compound interest is interest earned on both the original sum and the interest already added. It makes savings grow faster over time.",
    "a rainbow": "A rainbow appears when sunlight is bent and reflected inside raindrops. The light splits into its colours from red to violet.",
    "the internet": "The internet is a global network of computers that exchange data using shared protocols. It carries the web, email and video calls.",
    "democracy": "Democracy is a system of government in which citizens choose their leaders by voting. Power rests with the people.",
    "DNA": "DNA is the molecule that carries genetic instructions in living things. It is shaped like a twisted ladder called a double helix.",
}
ZH_CONCEPTS = {
    "光合作用": "光合作用是植物利用阳光、水和二氧化碳制造糖类的过程，同时释放出氧气。",
    "黑洞": "黑洞是引力极强的天体区域，连光都无法逃脱，通常由大质量恒星坍缩形成。",
    "通货膨胀": "通货膨胀是物价总体持续上涨的现象，意味着同样的钱能买到的东西变少。",
    "地震": "地震是地面突然发生的震动，通常由地下岩层沿断层错动引起。",
    "疫苗": "疫苗通过训练免疫系统识别病原体，帮助身体在真正感染时更快地抵抗疾病。",
    "互联网": "互联网是由全球计算机通过统一协议互相连接组成的网络，承载网页、邮件和视频通话。",
}

EN_QUESTIONS = [
    "What is {t}?",
    "Can you explain {t}?",
    "Tell me about {t}.",
    "Explain {t} in a few words.",
    "I keep hearing about {t}. What is it?",
]
LANG_QUESTIONS = [
    "Tell me about the {t} programming language.",
    "What is {t} known for?",
    "Who created {t}?",
    "Give me a short intro to {t}.",
]
PLANET_QUESTIONS = [
    "Tell me about the planet {t}.",
    "What do you know about {t}?",
    "Describe {t} briefly.",
    "Where is {t} in the solar system?",
]
ZH_QUESTIONS = ["什么是{t}？", "请简单解释一下{t}。", "{t}是怎么回事？", "给我讲讲{t}。"]


def topics() -> dict[str, tuple[list[str], str]]:
    """Every topic with its question templates and reference answer."""
    table: dict[str, tuple[list[str], str]] = {}
    for name, creator, year, trait in LANGUAGES:
        table[name] = (
            LANG_QUESTIONS,
            f"{name} is a programming language created by {creator} in {year}. It is known for {trait}.",
        )
    for name, order, trait, moons in PLANETS:
        table[name] = (PLANET_QUESTIONS, f"{name} is the {order} planet from the Sun and {trait}. It has {moons}.")
    for name, answer in CONCEPTS.items():
        table[name] = (EN_QUESTIONS, answer)
    for name, answer in ZH_CONCEPTS.items():
        table[name] = (ZH_QUESTIONS, answer)
    return table


_TOPICS = topics()


def generate(rng: random.Random, scenario: Scenario) -> Example:
    topic = rng.choice(sorted(_TOPICS))
    questions, answer = _TOPICS[topic]
    question = rng.choice(questions).format(t=topic)
    return Example(messages=[{"role": "user", "content": question}], answer=answer)
