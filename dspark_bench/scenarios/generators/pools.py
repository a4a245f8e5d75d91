"""Word pools shared by the generators: names, places, products. Plain data, no logic."""

from __future__ import annotations

import random

ZH_SURNAMES = "王李张刘陈杨黄赵吴周徐孙马朱胡郭何林高罗郑梁谢宋唐许韩冯邓曹彭曾萧田董潘袁蔡蒋余于杜叶程魏苏吕丁沈任姚卢傅钟姜崔谭廖范汪陆金石戴贾韦夏邱方侯邹熊孟秦白江阎薛尹段雷黎史龙陶贺顾毛郝龚邵万钱严覃武"
ZH_GIVEN = (
    "伟芳娜秀英敏静丽强磊军洋勇艳杰娟涛明超秀兰霞平刚桂英华建国志文斌鹏辉玲婷雪梅晨浩宇子轩欣怡思远嘉琪佳怡一鸣海燕春生晓东俊杰"
)
EN_FIRST = (
    "James Mary John Patricia Robert Jennifer Michael Linda David Elizabeth William Barbara Richard Susan Joseph "
    "Jessica Thomas Sarah Charles Karen Daniel Nancy Matthew Lisa Anthony Betty Mark Sandra Steven Ashley Paul Emily "
    "Andrew Kimberly Joshua Donna Kevin Michelle Brian Carol George Amanda Edward Melissa Ronald Deborah Timothy Laura "
    "Jason Rebecca Ryan Sharon Jacob Cynthia Gary Kathleen Nicholas Amy Eric Angela Jonathan Helen Oliver Chloe Lucas Mia"
).split()
EN_LAST = (
    "Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez Gonzalez Wilson "
    "Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris Sanchez Clark Ramirez Lewis Robinson "
    "Walker Young Allen King Wright Scott Torres Nguyen Hill Flores Green Adams Nelson Baker Hall Rivera Campbell "
    "Mitchell Carter Roberts Chen Wang Patel Kim Singh Murphy Cooper Reed Bailey Bell Ward"
).split()

ZH_CITIES = {
    "北京市": ["朝阳区", "海淀区", "东城区", "西城区", "丰台区"],
    "上海市": ["浦东新区", "徐汇区", "静安区", "黄浦区", "长宁区"],
    "广东省广州市": ["天河区", "越秀区", "海珠区", "番禺区"],
    "广东省深圳市": ["南山区", "福田区", "宝安区", "龙岗区"],
    "浙江省杭州市": ["西湖区", "上城区", "滨江区", "余杭区"],
    "江苏省南京市": ["鼓楼区", "玄武区", "秦淮区", "建邺区"],
    "四川省成都市": ["锦江区", "武侯区", "青羊区", "高新区"],
    "湖北省武汉市": ["江汉区", "武昌区", "洪山区", "汉阳区"],
    "陕西省西安市": ["雁塔区", "碑林区", "未央区", "莲湖区"],
    "天津市": ["和平区", "南开区", "河西区", "滨海新区"],
}
ZH_ROADS = "建国路 中山路 人民路 解放路 长安街 南京路 淮海路 文一路 天府大道 珞喻路 科技园路 学院路 滨江大道 延安路 友谊路 青年路 东风路 光明街".split()
EN_STREETS = (
    "Oak Maple Pine Cedar Elm Main Park Lake Hill Washington Lincoln Sunset River Highland Church Market Spring Willow".split()
)
EN_STREET_KINDS = "Street Avenue Road Lane Drive Boulevard Court Way".split()
EN_CITIES = [
    ("Springfield", "IL"),
    ("Austin", "TX"),
    ("Portland", "OR"),
    ("Denver", "CO"),
    ("Seattle", "WA"),
    ("Boston", "MA"),
    ("Madison", "WI"),
    ("Phoenix", "AZ"),
    ("Columbus", "OH"),
    ("Raleigh", "NC"),
    ("San Jose", "CA"),
    ("Nashville", "TN"),
    ("Atlanta", "GA"),
    ("Miami", "FL"),
    ("Buffalo", "NY"),
]

ZH_PRODUCTS = (
    "无线蓝牙耳机 机械键盘 保温杯 运动鞋 纯棉T恤 双肩背包 电动牙刷 空气炸锅 护眼台灯 瑜伽垫 智能手环 充电宝 "
    "不锈钢炒锅 羽绒服 牛仔裤 咖啡豆 绿茶礼盒 洗发水 面霜 儿童绘本 数据线 鼠标垫 电热水壶 加湿器 行李箱 "
    "雨伞 乳胶枕 床上四件套 蓝牙音箱 平板支架 登山杖 跳绳 哑铃 护手霜 坚果礼包 手冲咖啡壶 陶瓷餐具套装"
).split()
EN_PRODUCTS = (
    "wireless earbuds|mechanical keyboard|insulated water bottle|running shoes|cotton t-shirt|laptop backpack|"
    "electric toothbrush|air fryer|desk lamp|yoga mat|fitness tracker|power bank|frying pan|down jacket|denim jeans|"
    "coffee beans|green tea set|shampoo|face cream|picture book|USB-C cable|mouse pad|electric kettle|humidifier|"
    "carry-on suitcase|umbrella|memory foam pillow|bed sheet set|bluetooth speaker|tablet stand|hiking poles|"
    "jump rope|dumbbell set|hand cream|mixed nuts|pour-over kettle|ceramic dinner set|gaming mouse|phone case"
).split("|")


def zh_name(rng: random.Random) -> str:
    given = rng.choice(ZH_GIVEN) + (rng.choice(ZH_GIVEN) if rng.random() < 0.6 else "")
    return rng.choice(ZH_SURNAMES) + given


def en_name(rng: random.Random) -> str:
    return f"{rng.choice(EN_FIRST)} {rng.choice(EN_LAST)}"


def zh_address(rng: random.Random) -> str:
    city = rng.choice(list(ZH_CITIES))
    district = rng.choice(ZH_CITIES[city])
    address = f"{city}{district}{rng.choice(ZH_ROADS)}{rng.randint(1, 999)}号"
    if rng.random() < 0.5:
        address += f"{rng.randint(1, 30)}栋{rng.randint(1, 30)}0{rng.randint(1, 9)}室"
    return address


def en_address(rng: random.Random) -> str:
    city, state = rng.choice(EN_CITIES)
    street = f"{rng.randint(1, 9999)} {rng.choice(EN_STREETS)} {rng.choice(EN_STREET_KINDS)}"
    if rng.random() < 0.3:
        street += f", Apt {rng.randint(1, 40)}{rng.choice('ABCD')}"
    return f"{street}, {city}, {state} {rng.randint(10000, 99999)}"


def money(rng: random.Random, low_cents: int, high_cents: int) -> int | float:
    """A price as a JSON number whose text form is short: whole, .5, or two decimals."""
    cents = rng.randint(low_cents, high_cents)
    style = rng.random()
    if style < 0.45:
        cents -= cents % 100
    elif style < 0.7:
        cents -= cents % 10
    cents = max(cents, 100)
    return cents // 100 if cents % 100 == 0 else cents / 100


def fmt_number(value: int | float) -> str:
    """The text of a JSON number exactly as json.dumps writes it, so the model copies digits verbatim."""
    return repr(value) if isinstance(value, float) else str(value)


def add_money(values: list[int | float]) -> int | float:
    cents = sum(round(v * 100) for v in values)
    return cents // 100 if cents % 100 == 0 else cents / 100
