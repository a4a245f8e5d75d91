from gevent import monkey

monkey.patch_all()  # as Locust does, but before anything imports ssl
