"""The many-topics raw generator (``magnetar.cli.blast_topics``, issue 22): SEND templates with a
patched producer id and batches, and producers on many topics sharing connections against a real
broker, read back with the official client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from magnetar.cli.blast import SendTemplate
from magnetar.cli.blast_topics import BlastError, TopicsBlaster
from magnetar.protocol.pulsar.batch import decode_batch
from magnetar.protocol.pulsar.frames import decode_frame
from tests.compat.harness import BrokerThread

pytestmark = pytest.mark.timeout(120)


def test_a_template_frame_carries_the_producer_id_and_sequence_id_it_is_given() -> None:
    template = SendTemplate(0, "many", b"p" * 40)
    for producer_id, sequence_id in ((0, 0), (7, 1), (9_999, 2**33)):
        frame = decode_frame(memoryview(template.frame(sequence_id, producer_id)))
        assert (frame.command.send.producer_id, frame.command.send.sequence_id) == (producer_id, sequence_id)
        assert frame.message is not None and frame.message.metadata.producer_name == "many"
    assert decode_frame(memoryview(template.frame(3))).command.send.producer_id == 0  # the template's own


def test_a_batched_template_frame_is_one_batch_of_its_count() -> None:
    template = SendTemplate(2, "many", b"q" * 10, batch_count=5)
    frame = decode_frame(memoryview(template.frame(4)))
    assert frame.command.send.num_messages == 5 and frame.message is not None
    assert frame.message.metadata.num_messages_in_batch == 5
    assert [bytes(m.payload) for m in decode_batch(frame.message.payload, 5)] == [b"q" * 10] * 5
    with pytest.raises(ValueError):
        SendTemplate(2, "many", b"q", batch_count=0)


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    running = BrokerThread().start()
    try:
        yield running
    finally:
        running.stop()


def _run(broker: BrokerThread, body: object) -> None:
    host, _, port = broker.url[len("pulsar://"):].rpartition(":")

    async def main() -> None:
        blaster = TopicsBlaster(host, int(port), "persistent://public/default/many", connections=3,
                                producer_name="many")
        await blaster.connect()
        try:
            await body(blaster)  # type: ignore[operator]
        finally:
            blaster.close()

    asyncio.run(main())


@pytest.mark.integration
def test_producers_on_many_topics_share_connections_and_every_message_is_stored(broker: BrokerThread) -> None:
    import pulsar

    async def body(blaster: TopicsBlaster) -> None:
        await blaster.add_topics(4)
        await blaster.add_topics(7)  # cumulative: topics 4..6 added
        assert [len(link.topics) for link in blaster.links] == [3, 3, 3]  # topic 0 on each, i on i % 3
        templates = blaster.templates(b"m" * 32)
        await blaster.send_load(templates, 7, window=30, seconds=None, frames_per_producer=2)
        await blaster.send_load(templates, 7, window=30, seconds=None, frames_per_producer=1, first=5)
        # topic 0: 3 producers x 2; topics 1-4: 2 each; 5 and 6: 2 + 1
        assert blaster.totals() == (3 * 2 + 4 * 2 + 2 * 3, 0)

    _run(broker, body)
    client = pulsar.Client(broker.url)
    try:
        for index, expected in ((0, 6), (3, 2), (6, 3)):
            reader = client.create_reader(f"persistent://public/default/many-{index}", pulsar.MessageId.earliest)
            received = 0
            while reader.has_message_available():
                assert reader.read_next(timeout_millis=10_000).data() == b"m" * 32
                received += 1
            assert received == expected, index
    finally:
        client.close()


@pytest.mark.integration
def test_a_refused_producer_is_an_error(broker: BrokerThread) -> None:
    async def body(blaster: TopicsBlaster) -> None:
        blaster.prefix = "persistent://public/default/not a valid name/x"  # control: the broker refuses it
        with pytest.raises(BlastError, match="PRODUCER refused"):
            await blaster.add_topics(1)

    _run(broker, body)
