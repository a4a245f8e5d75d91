"""Review sentiment extraction for batch pipelines: a product review -> product, sentiment, aspects, score."""

from __future__ import annotations

import random

from dspark_bench.scenarios.generators import politeness, pools
from dspark_bench.scenarios.spec import Example, Scenario

INSTRUCTION_ZH = (
    '分析下面的商品评论，严格输出JSON格式 {"product":...,"sentiment":"positive|negative|neutral|mixed",'
    '"aspects":[{"aspect":...,"sentiment":"positive|negative"}],"score":1-5}'
)
INSTRUCTION_EN = (
    "Analyse the product review below and output strictly JSON in the format "
    '{"product":...,"sentiment":"positive|negative|neutral|mixed","aspects":[{"aspect":...,'
    '"sentiment":"positive|negative"}],"score":1-5}'
)

# aspect -> (positive phrases, negative phrases)
EN_ASPECTS = {
    "battery": (["the battery lasts all day", "battery life is excellent"], ["the battery dies fast", "battery life is poor"]),
    "price": (["the price is fair", "great value for money"], ["it is overpriced", "the price is too high"]),
    "quality": (["build quality feels solid", "the quality is great"], ["it feels cheap", "the quality is bad"]),
    "delivery": (["delivery was fast", "it arrived early"], ["delivery took forever", "it arrived late"]),
    "design": (["the design looks great", "I love the design"], ["the design is ugly", "the design looks dated"]),
    "size": (["the size is just right", "it fits perfectly"], ["it is too small", "the size is wrong"]),
    "sound": (["the sound is clear", "sound quality is rich"], ["the sound is muffled", "sound quality is weak"]),
    "service": (
        ["customer service was helpful", "the seller replied quickly"],
        ["customer service ignored me", "the seller was rude"],
    ),
}
ZH_ASPECTS = {
    "续航": (["续航很给力", "电池能用一整天"], ["续航太差", "电池掉电很快"]),
    "价格": (["价格实惠", "性价比很高"], ["价格偏贵", "性价比太低"]),
    "质量": (["做工扎实", "质量很好"], ["做工粗糙", "质量很差"]),
    "物流": (["物流很快", "第二天就到了"], ["物流太慢", "等了一个多星期"]),
    "外观": (["外观好看", "颜值很高"], ["外观难看", "颜色和图片不符"]),
    "尺寸": (["尺寸刚好", "大小合适"], ["尺寸偏小", "大小不合适"]),
    "音质": (["音质清晰", "低音很足"], ["音质发闷", "有杂音"]),
    "客服": (["客服很耐心", "卖家回复及时"], ["客服态度差", "卖家不理人"]),
}


def _overall(polarities: list[str]) -> str:
    kinds = set(polarities)
    if not kinds:
        return "neutral"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _score(rng: random.Random, sentiment: str) -> int:
    return {"positive": rng.choice([4, 5]), "negative": rng.choice([1, 2]), "mixed": rng.choice([2, 3, 4]), "neutral": 3}[
        sentiment
    ]


def generate(rng: random.Random, scenario: Scenario) -> Example:
    chinese = rng.random() < 0.5
    table = ZH_ASPECTS if chinese else EN_ASPECTS
    product = rng.choice(pools.ZH_PRODUCTS if chinese else pools.EN_PRODUCTS)
    chosen = rng.sample(list(table), rng.choices([0, 1, 2, 3], weights=[1, 3, 4, 3])[0])
    aspects = [{"aspect": name, "sentiment": rng.choice(["positive", "negative"])} for name in chosen]
    sentiment = _overall([a["sentiment"] for a in aspects])
    score = _score(rng, sentiment)
    clauses = [rng.choice(table[a["aspect"]][0 if a["sentiment"] == "positive" else 1]) for a in aspects]
    if chinese:
        body = "，".join(clauses) if clauses else rng.choice(["没什么特别的感觉", "中规中矩吧", "还没怎么用"])
        opener = rng.choice(["买了这款{p}，", "这个{p}用了一周，", "{p}收到了，", "给家里买的{p}，"]).format(p=product)
        closer = rng.choice(["打{s}分。", "评分：{s}星。", "给{s}星。"]).format(s=score)
        text, instruction = f"{opener}{body}。{closer}", INSTRUCTION_ZH
    else:
        body = (
            ", ".join(clauses)
            if clauses
            else rng.choice(["nothing special to say", "it is okay I guess", "have not used it much"])
        )
        opener = rng.choice(
            ["I bought this {p}: ", "Used the {p} for a week; ", "Review of the {p}: ", "Got the {p} as a gift. "]
        ).format(p=product)
        closer = rng.choice(["{s} stars.", "Rating: {s}/5.", "I give it {s} out of 5."]).format(s=score)
        text, instruction = f"{opener}{body}. {closer}", INSTRUCTION_EN
    answer = {"product": product, "sentiment": sentiment, "aspects": aspects, "score": score}
    polite = politeness.closing(rng, chinese)
    return Example(messages=[{"role": "user", "content": f"{instruction}\n\n{text}{polite}"}], answer=answer)
