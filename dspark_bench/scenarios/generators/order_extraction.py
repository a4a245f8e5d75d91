"""Order extraction, the source article's task: free-text orders (Chinese or English) -> nested JSON."""

from __future__ import annotations

import random

from dspark_bench.scenarios.generators import politeness, pools
from dspark_bench.scenarios.spec import Example, Scenario

# The article's prompt, verbatim in spirit: the JSON shape is spelled out in the instruction.
ZH_INSTRUCTION = (
    '从下面订单文本中抽取信息，严格输出JSON格式 {"order_id":...,"user":{"name":...,"address":...},'
    '"items":[{"name":...,"price":...}],"total":...}'
)
EN_INSTRUCTION = (
    "Extract the order information from the text below and output strictly JSON in the format "
    '{"order_id":...,"user":{"name":...,"address":...},"items":[{"name":...,"price":...}],"total":...}'
)

ZH_NOISE = [
    "请尽快发货，谢谢！",
    "备注：工作日送货。",
    "联系电话 138{d}。",
    "优惠码 SPRING{d} 已使用。",
    "顾客要求开发票。",
    "包装请用纸箱。",
    "下单时间 2024-0{m}-1{m} 10:2{m}。",
    "如有问题请电话联系。",
]
EN_NOISE = [
    "Please ship ASAP, thanks!",
    "Note: deliver on weekdays only.",
    "Phone: 555-01{d}.",
    "Coupon SAVE{d} applied.",
    "Customer asked for a paper invoice.",
    "Gift wrap requested.",
    "Placed on 2024-0{m}-1{m} at 10:2{m}.",
    "Leave the parcel at the front desk.",
]


def _order_id(rng: random.Random) -> str:
    style = rng.randrange(4)
    if style == 0:
        return f"ORD-2024{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}-{rng.randint(1000, 9999)}"
    if style == 1:
        return f"SO{rng.randint(10_000_000, 99_999_999)}"
    if style == 2:
        return f"A{rng.randint(100, 999)}-{rng.randint(10000, 99999)}"
    return f"{rng.choice('JDTMPX')}{rng.choice('DBXK')}{rng.randint(100000000, 999999999)}"


def _noise(rng: random.Random, pool: list[str]) -> str:
    return rng.choice(pool).format(d=rng.randint(1000, 9999), m=rng.randint(1, 9))


def _zh_text(rng: random.Random, order_id: str, name: str, address: str, items: list[dict], total: str) -> str:
    unit = rng.choice(["¥{}", "{}元", "￥{}"])
    parts = [
        f"{item['name']}{rng.choice(['', '一件', '1件'])}（{unit.format(pools.fmt_number(item['price']))}）" for item in items
    ]
    listing = rng.choice(["、", "，", "；"]).join(parts)
    templates = [
        "订单号{oid}，客户{name}，收货地址{addr}。购买了{items}，合计{total}。",
        "客户{name}下单（订单编号：{oid}），商品：{items}。总价{total}，寄往{addr}。",
        "【订单{oid}】收件人：{name}；地址：{addr}；明细：{items}；总金额：{total}。",
        "{name}在店里买了{items}，订单号是{oid}，一共{total}，送到{addr}。",
    ]
    text = rng.choice(templates).format(oid=order_id, name=name, addr=address, items=listing, total=unit.format(total))
    return _with_noise(rng, text, ZH_NOISE)


def _en_text(rng: random.Random, order_id: str, name: str, address: str, items: list[dict], total: str) -> str:
    unit = rng.choice(["${}", "{} USD", "USD {}"])
    parts = [f"{item['name']} ({unit.format(pools.fmt_number(item['price']))})" for item in items]
    listing = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    templates = [
        "Order {oid} from {name}, shipping to {addr}. Items: {items}. Total {total}.",
        "Customer {name} placed order #{oid}: {items}. The total comes to {total}; ship to {addr}.",
        "[Order {oid}] Recipient: {name}; Address: {addr}; Lines: {items}; Amount due: {total}.",
        "{name} bought {items} under order number {oid}, paying {total} in all. Deliver to {addr}.",
    ]
    text = rng.choice(templates).format(oid=order_id, name=name, addr=address, items=listing, total=unit.format(total))
    return _with_noise(rng, text, EN_NOISE)


def _with_noise(rng: random.Random, text: str, pool: list[str]) -> str:
    if rng.random() < 0.5:
        noise = _noise(rng, pool)
        text = (
            f"{noise}{' ' if pool is EN_NOISE else ''}{text}"
            if rng.random() < 0.3
            else f"{text}{' ' if pool is EN_NOISE else ''}{noise}"
        )
    return text


def generate(rng: random.Random, scenario: Scenario) -> Example:
    chinese = rng.random() < 0.5
    order_id = _order_id(rng)
    name = pools.zh_name(rng) if chinese else pools.en_name(rng)
    address = pools.zh_address(rng) if chinese else pools.en_address(rng)
    catalogue = pools.ZH_PRODUCTS if chinese else pools.EN_PRODUCTS
    products = rng.sample(catalogue, rng.randint(1, 4))
    prices = [pools.money(rng, 500, 99900) for _ in products]  # drawn after the products: the seeds' orders stay
    items = [{"name": product, "price": price} for product, price in zip(products, prices, strict=True)]
    total = pools.add_money(prices)
    render = _zh_text if chinese else _en_text
    text = render(rng, order_id, name, address, items, pools.fmt_number(total))
    instruction = ZH_INSTRUCTION if chinese or rng.random() < 0.5 else EN_INSTRUCTION
    answer = {"order_id": order_id, "user": {"name": name, "address": address}, "items": items, "total": total}
    polite = politeness.closing(rng, instruction is ZH_INSTRUCTION)
    return Example(messages=[{"role": "user", "content": f"{instruction}\n\n{text}{polite}"}], answer=answer)
