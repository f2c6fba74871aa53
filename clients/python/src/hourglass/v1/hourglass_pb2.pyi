from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

CALENDAR_POLICY_SHIFT: CalendarPolicy
CALENDAR_POLICY_SKIP: CalendarPolicy
CALENDAR_POLICY_UNSPECIFIED: CalendarPolicy
CANCEL_RESULT_ALREADY_CANCELLED: CancelResult
CANCEL_RESULT_ALREADY_DELIVERED: CancelResult
CANCEL_RESULT_CANCELLED: CancelResult
CANCEL_RESULT_UNKNOWN: CancelResult
CANCEL_RESULT_UNSPECIFIED: CancelResult
DESCRIPTOR: _descriptor.FileDescriptor
EDIT_RESULT_ALREADY_CANCELLED: EditResult
EDIT_RESULT_ALREADY_DELIVERED: EditResult
EDIT_RESULT_EDITED: EditResult
EDIT_RESULT_UNKNOWN: EditResult
EDIT_RESULT_UNSPECIFIED: EditResult
FREEZE_RESULT_ALREADY_CANCELLED: FreezeResult
FREEZE_RESULT_ALREADY_DELIVERED: FreezeResult
FREEZE_RESULT_ALREADY_FROZEN: FreezeResult
FREEZE_RESULT_FROZEN: FreezeResult
FREEZE_RESULT_NOT_FROZEN: FreezeResult
FREEZE_RESULT_THAWED: FreezeResult
FREEZE_RESULT_UNKNOWN: FreezeResult
FREEZE_RESULT_UNSPECIFIED: FreezeResult
MESSAGE_STATE_ACKED: MessageState
MESSAGE_STATE_CANCELLED: MessageState
MESSAGE_STATE_DEAD_LETTERED: MessageState
MESSAGE_STATE_DELIVERED: MessageState
MESSAGE_STATE_DELIVERING: MessageState
MESSAGE_STATE_DUE: MessageState
MESSAGE_STATE_LEASED: MessageState
MESSAGE_STATE_NOT_FOUND: MessageState
MESSAGE_STATE_PENDING: MessageState
MESSAGE_STATE_RESCHEDULED: MessageState
MESSAGE_STATE_UNSPECIFIED: MessageState
MISFIRE_POLICY_FIRE_ALL: MisfirePolicy
MISFIRE_POLICY_FIRE_LATEST: MisfirePolicy
MISFIRE_POLICY_SKIP: MisfirePolicy
MISFIRE_POLICY_UNSPECIFIED: MisfirePolicy
OVERLAP_POLICY_ALLOW: OverlapPolicy
OVERLAP_POLICY_BUFFER_ONE: OverlapPolicy
OVERLAP_POLICY_SKIP: OverlapPolicy
OVERLAP_POLICY_UNSPECIFIED: OverlapPolicy
RESCHEDULE_RESULT_ALREADY_CANCELLED: RescheduleResult
RESCHEDULE_RESULT_ALREADY_DELIVERED: RescheduleResult
RESCHEDULE_RESULT_RESCHEDULED: RescheduleResult
RESCHEDULE_RESULT_UNKNOWN: RescheduleResult
RESCHEDULE_RESULT_UNSPECIFIED: RescheduleResult
WEEKDAY_FRIDAY: Weekday
WEEKDAY_MONDAY: Weekday
WEEKDAY_SATURDAY: Weekday
WEEKDAY_SUNDAY: Weekday
WEEKDAY_THURSDAY: Weekday
WEEKDAY_TUESDAY: Weekday
WEEKDAY_UNSPECIFIED: Weekday
WEEKDAY_WEDNESDAY: Weekday

class AckBatchRequest(_message.Message):
    __slots__ = ["receipts", "topic"]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    receipts: _containers.RepeatedScalarFieldContainer[str]
    topic: str
    def __init__(self, topic: _Optional[str] = ..., receipts: _Optional[_Iterable[str]] = ...) -> None: ...

class AckBatchResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AckResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AckResult, _Mapping]]] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ["id", "receipt", "topic"]
    ID_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    id: str
    receipt: str
    topic: str
    def __init__(self, topic: _Optional[str] = ..., id: _Optional[str] = ..., receipt: _Optional[str] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class AckResult(_message.Message):
    __slots__ = ["acked", "error"]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    acked: bool
    error: str
    def __init__(self, acked: bool = ..., error: _Optional[str] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ["action", "at", "error", "peer", "request", "response", "result", "seq", "target", "who"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    WHO_FIELD_NUMBER: _ClassVar[int]
    action: str
    at: _timestamp_pb2.Timestamp
    error: str
    peer: str
    request: str
    response: str
    result: str
    seq: int
    target: str
    who: str
    def __init__(self, seq: _Optional[int] = ..., at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., who: _Optional[str] = ..., action: _Optional[str] = ..., target: _Optional[str] = ..., request: _Optional[str] = ..., response: _Optional[str] = ..., result: _Optional[str] = ..., error: _Optional[str] = ..., peer: _Optional[str] = ...) -> None: ...

class BackfillScheduleRequest(_message.Message):
    __slots__ = ["name", "to"]
    FROM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    name: str
    to: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., to: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., **kwargs) -> None: ...

class BackfillScheduleResponse(_message.Message):
    __slots__ = ["existing", "stored"]
    EXISTING_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    existing: int
    stored: int
    def __init__(self, stored: _Optional[int] = ..., existing: _Optional[int] = ...) -> None: ...

class Backoff(_message.Message):
    __slots__ = ["initial_ms", "jitter", "max_ms", "multiplier"]
    INITIAL_MS_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    MAX_MS_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    initial_ms: int
    jitter: float
    max_ms: int
    multiplier: float
    def __init__(self, initial_ms: _Optional[int] = ..., max_ms: _Optional[int] = ..., multiplier: _Optional[float] = ..., jitter: _Optional[float] = ...) -> None: ...

class Calendar(_message.Message):
    __slots__ = ["closed_dates", "hours", "name", "time_zone"]
    CLOSED_DATES_FIELD_NUMBER: _ClassVar[int]
    HOURS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    closed_dates: _containers.RepeatedScalarFieldContainer[str]
    hours: _containers.RepeatedCompositeFieldContainer[WorkingHours]
    name: str
    time_zone: str
    def __init__(self, name: _Optional[str] = ..., time_zone: _Optional[str] = ..., hours: _Optional[_Iterable[_Union[WorkingHours, _Mapping]]] = ..., closed_dates: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ["id", "key", "topic"]
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    id: str
    key: str
    topic: str
    def __init__(self, id: _Optional[str] = ..., topic: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ["result"]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: CancelResult
    def __init__(self, result: _Optional[_Union[CancelResult, str]] = ...) -> None: ...

class ConsumeBatch(_message.Message):
    __slots__ = ["attempts", "bodies", "dead_letters", "deliver_at_deltas", "deliver_at_ms", "first_seq", "header_counts", "header_keys", "header_values", "ids", "lease_expires_at_ms", "origin_ids", "receipts", "received_at_ms", "topic"]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_DELTAS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    HEADER_COUNTS_FIELD_NUMBER: _ClassVar[int]
    HEADER_KEYS_FIELD_NUMBER: _ClassVar[int]
    HEADER_VALUES_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_IDS_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    attempts: _containers.RepeatedScalarFieldContainer[int]
    bodies: _containers.RepeatedScalarFieldContainer[bytes]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetter]
    deliver_at_deltas: _containers.RepeatedScalarFieldContainer[int]
    deliver_at_ms: int
    first_seq: int
    header_counts: _containers.RepeatedScalarFieldContainer[int]
    header_keys: _containers.RepeatedScalarFieldContainer[str]
    header_values: _containers.RepeatedScalarFieldContainer[str]
    ids: bytes
    lease_expires_at_ms: int
    origin_ids: bytes
    receipts: _containers.RepeatedScalarFieldContainer[str]
    received_at_ms: int
    topic: str
    def __init__(self, topic: _Optional[str] = ..., first_seq: _Optional[int] = ..., received_at_ms: _Optional[int] = ..., lease_expires_at_ms: _Optional[int] = ..., ids: _Optional[bytes] = ..., bodies: _Optional[_Iterable[bytes]] = ..., deliver_at_ms: _Optional[int] = ..., deliver_at_deltas: _Optional[_Iterable[int]] = ..., attempts: _Optional[_Iterable[int]] = ..., origin_ids: _Optional[bytes] = ..., header_counts: _Optional[_Iterable[int]] = ..., header_keys: _Optional[_Iterable[str]] = ..., header_values: _Optional[_Iterable[str]] = ..., dead_letters: _Optional[_Iterable[_Union[DeadLetter, _Mapping]]] = ..., receipts: _Optional[_Iterable[str]] = ...) -> None: ...

class ConsumeCredit(_message.Message):
    __slots__ = ["credits"]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    credits: int
    def __init__(self, credits: _Optional[int] = ...) -> None: ...

class ConsumeExtend(_message.Message):
    __slots__ = ["lease_ms", "ref", "seqs"]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    SEQS_FIELD_NUMBER: _ClassVar[int]
    lease_ms: int
    ref: int
    seqs: _containers.RepeatedCompositeFieldContainer[SeqRange]
    def __init__(self, ref: _Optional[int] = ..., seqs: _Optional[_Iterable[_Union[SeqRange, _Mapping]]] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class ConsumeExtended(_message.Message):
    __slots__ = ["errors", "failed", "lease_expires_at_ms", "ref"]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    errors: _containers.RepeatedScalarFieldContainer[str]
    failed: _containers.RepeatedScalarFieldContainer[int]
    lease_expires_at_ms: int
    ref: int
    def __init__(self, ref: _Optional[int] = ..., failed: _Optional[_Iterable[int]] = ..., errors: _Optional[_Iterable[str]] = ..., lease_expires_at_ms: _Optional[int] = ...) -> None: ...

class ConsumeNack(_message.Message):
    __slots__ = ["dead_letter", "delay_ms", "reason", "release", "seq"]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    dead_letter: bool
    delay_ms: int
    reason: str
    release: bool
    seq: int
    def __init__(self, seq: _Optional[int] = ..., delay_ms: _Optional[int] = ..., reason: _Optional[str] = ..., dead_letter: bool = ..., release: bool = ...) -> None: ...

class ConsumeOpen(_message.Message):
    __slots__ = ["credits", "lease_ms", "max_batch", "topic"]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    credits: int
    lease_ms: int
    max_batch: int
    topic: str
    def __init__(self, topic: _Optional[str] = ..., credits: _Optional[int] = ..., lease_ms: _Optional[int] = ..., max_batch: _Optional[int] = ...) -> None: ...

class ConsumeRequest(_message.Message):
    __slots__ = ["credit", "extend", "open", "settle"]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    EXTEND_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    SETTLE_FIELD_NUMBER: _ClassVar[int]
    credit: ConsumeCredit
    extend: ConsumeExtend
    open: ConsumeOpen
    settle: ConsumeSettle
    def __init__(self, open: _Optional[_Union[ConsumeOpen, _Mapping]] = ..., credit: _Optional[_Union[ConsumeCredit, _Mapping]] = ..., settle: _Optional[_Union[ConsumeSettle, _Mapping]] = ..., extend: _Optional[_Union[ConsumeExtend, _Mapping]] = ...) -> None: ...

class ConsumeResponse(_message.Message):
    __slots__ = ["batch", "extended", "settled"]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    EXTENDED_FIELD_NUMBER: _ClassVar[int]
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    batch: ConsumeBatch
    extended: ConsumeExtended
    settled: ConsumeSettled
    def __init__(self, settled: _Optional[_Union[ConsumeSettled, _Mapping]] = ..., batch: _Optional[_Union[ConsumeBatch, _Mapping]] = ..., extended: _Optional[_Union[ConsumeExtended, _Mapping]] = ...) -> None: ...

class ConsumeSettle(_message.Message):
    __slots__ = ["acks", "nacks", "ref"]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    NACKS_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[SeqRange]
    nacks: _containers.RepeatedCompositeFieldContainer[ConsumeNack]
    ref: int
    def __init__(self, ref: _Optional[int] = ..., acks: _Optional[_Iterable[_Union[SeqRange, _Mapping]]] = ..., nacks: _Optional[_Iterable[_Union[ConsumeNack, _Mapping]]] = ...) -> None: ...

class ConsumeSettled(_message.Message):
    __slots__ = ["errors", "failed", "ref"]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    errors: _containers.RepeatedScalarFieldContainer[str]
    failed: _containers.RepeatedScalarFieldContainer[int]
    ref: int
    def __init__(self, ref: _Optional[int] = ..., failed: _Optional[_Iterable[int]] = ..., errors: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateCalendarRequest(_message.Message):
    __slots__ = ["calendar"]
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    calendar: Calendar
    def __init__(self, calendar: _Optional[_Union[Calendar, _Mapping]] = ...) -> None: ...

class CreateCalendarResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: RecurringSchedule
    def __init__(self, schedule: _Optional[_Union[RecurringSchedule, _Mapping]] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ["next"]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    next: _timestamp_pb2.Timestamp
    def __init__(self, next: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ["at", "attempts", "last_error", "origin_topic", "reason"]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TOPIC_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    attempts: int
    last_error: str
    origin_topic: str
    reason: str
    def __init__(self, origin_topic: _Optional[str] = ..., reason: _Optional[str] = ..., last_error: _Optional[str] = ..., attempts: _Optional[int] = ..., at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeleteCalendarRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteCalendarResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ["topic"]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ["cancelled", "removed"]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    removed: int
    def __init__(self, cancelled: _Optional[int] = ..., removed: _Optional[int] = ...) -> None: ...

class EditRequest(_message.Message):
    __slots__ = ["body", "headers", "id", "key", "set_headers", "topic"]
    BODY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SET_HEADERS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    id: str
    key: str
    set_headers: bool
    topic: str
    def __init__(self, id: _Optional[str] = ..., topic: _Optional[str] = ..., key: _Optional[str] = ..., body: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., set_headers: bool = ...) -> None: ...

class EditResponse(_message.Message):
    __slots__ = ["deliver_at", "id", "result"]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    deliver_at: _timestamp_pb2.Timestamp
    id: str
    result: EditResult
    def __init__(self, result: _Optional[_Union[EditResult, str]] = ..., id: _Optional[str] = ..., deliver_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class EngineStats(_message.Message):
    __slots__ = ["cancelled", "corrupt", "delivered", "fired", "inflight", "loaded_buckets", "pending_loaded", "reput_lag_bytes", "retries", "scheduled", "segments", "unconfirmed"]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    CORRUPT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    FIRED_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    LOADED_BUCKETS_FIELD_NUMBER: _ClassVar[int]
    PENDING_LOADED_FIELD_NUMBER: _ClassVar[int]
    REPUT_LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    UNCONFIRMED_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    corrupt: int
    delivered: int
    fired: int
    inflight: int
    loaded_buckets: int
    pending_loaded: int
    reput_lag_bytes: int
    retries: int
    scheduled: int
    segments: int
    unconfirmed: int
    def __init__(self, scheduled: _Optional[int] = ..., cancelled: _Optional[int] = ..., fired: _Optional[int] = ..., delivered: _Optional[int] = ..., retries: _Optional[int] = ..., pending_loaded: _Optional[int] = ..., inflight: _Optional[int] = ..., loaded_buckets: _Optional[int] = ..., segments: _Optional[int] = ..., reput_lag_bytes: _Optional[int] = ..., corrupt: _Optional[int] = ..., unconfirmed: _Optional[int] = ...) -> None: ...

class ExtendRequest(_message.Message):
    __slots__ = ["id", "lease_ms", "receipt", "topic"]
    ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    id: str
    lease_ms: int
    receipt: str
    topic: str
    def __init__(self, topic: _Optional[str] = ..., id: _Optional[str] = ..., receipt: _Optional[str] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class ExtendResponse(_message.Message):
    __slots__ = ["lease_expires_at"]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    lease_expires_at: _timestamp_pb2.Timestamp
    def __init__(self, lease_expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class FlowBacklog(_message.Message):
    __slots__ = ["due", "flow_key", "held_by", "leased"]
    DUE_FIELD_NUMBER: _ClassVar[int]
    FLOW_KEY_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    due: int
    flow_key: str
    held_by: str
    leased: int
    def __init__(self, flow_key: _Optional[str] = ..., due: _Optional[int] = ..., leased: _Optional[int] = ..., held_by: _Optional[str] = ...) -> None: ...

class FreezeMessageRequest(_message.Message):
    __slots__ = ["id", "key", "topic"]
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    id: str
    key: str
    topic: str
    def __init__(self, id: _Optional[str] = ..., topic: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class FreezeMessageResponse(_message.Message):
    __slots__ = ["id", "remaining_ms", "result"]
    ID_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    id: str
    remaining_ms: int
    result: FreezeResult
    def __init__(self, result: _Optional[_Union[FreezeResult, str]] = ..., id: _Optional[str] = ..., remaining_ms: _Optional[int] = ...) -> None: ...

class FrozenPause(_message.Message):
    __slots__ = ["began_at", "ended_at"]
    BEGAN_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    began_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    def __init__(self, began_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetCalendarRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetCalendarResponse(_message.Message):
    __slots__ = ["calendar"]
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    calendar: Calendar
    def __init__(self, calendar: _Optional[_Union[Calendar, _Mapping]] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ["topic"]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class GetPolicyResponse(_message.Message):
    __slots__ = ["effective", "freezes", "policy"]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    FREEZES_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    effective: Policy
    freezes: _containers.RepeatedCompositeFieldContainer[FrozenPause]
    policy: Policy
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ..., effective: _Optional[_Union[Policy, _Mapping]] = ..., freezes: _Optional[_Iterable[_Union[FrozenPause, _Mapping]]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ["id", "key", "topic"]
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    id: str
    key: str
    topic: str
    def __init__(self, id: _Optional[str] = ..., topic: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ["dead_letter_topic", "flow_key", "flow_wait", "lease_expires_at", "message", "queue_attempt", "rescheduled_to", "state"]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    FLOW_KEY_FIELD_NUMBER: _ClassVar[int]
    FLOW_WAIT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESCHEDULED_TO_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    dead_letter_topic: str
    flow_key: str
    flow_wait: str
    lease_expires_at: _timestamp_pb2.Timestamp
    message: Message
    queue_attempt: int
    rescheduled_to: str
    state: MessageState
    def __init__(self, state: _Optional[_Union[MessageState, str]] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., queue_attempt: _Optional[int] = ..., lease_expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., dead_letter_topic: _Optional[str] = ..., rescheduled_to: _Optional[str] = ..., flow_key: _Optional[str] = ..., flow_wait: _Optional[str] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ["name", "next_count"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NEXT_COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    next_count: int
    def __init__(self, name: _Optional[str] = ..., next_count: _Optional[int] = ...) -> None: ...

class GetScheduleResponse(_message.Message):
    __slots__ = ["armed_id", "buffered", "fired", "next", "schedule", "skipped"]
    ARMED_ID_FIELD_NUMBER: _ClassVar[int]
    BUFFERED_FIELD_NUMBER: _ClassVar[int]
    FIRED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    armed_id: str
    buffered: _timestamp_pb2.Timestamp
    fired: int
    next: _containers.RepeatedCompositeFieldContainer[_timestamp_pb2.Timestamp]
    schedule: RecurringSchedule
    skipped: int
    def __init__(self, schedule: _Optional[_Union[RecurringSchedule, _Mapping]] = ..., next: _Optional[_Iterable[_Union[_timestamp_pb2.Timestamp, _Mapping]]] = ..., armed_id: _Optional[str] = ..., fired: _Optional[int] = ..., skipped: _Optional[int] = ..., buffered: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ["key", "value"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class Lateness(_message.Message):
    __slots__ = ["count", "max_ms", "p50_ms", "p90_ms", "p99_ms"]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_MS_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P90_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    count: int
    max_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    def __init__(self, count: _Optional[int] = ..., p50_ms: _Optional[float] = ..., p90_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ..., max_ms: _Optional[float] = ...) -> None: ...

class ListAuditRequest(_message.Message):
    __slots__ = ["before_seq", "limit"]
    BEFORE_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    before_seq: int
    limit: int
    def __init__(self, limit: _Optional[int] = ..., before_seq: _Optional[int] = ...) -> None: ...

class ListAuditResponse(_message.Message):
    __slots__ = ["entries", "next_before_seq"]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEFORE_SEQ_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    next_before_seq: int
    def __init__(self, entries: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ..., next_before_seq: _Optional[int] = ...) -> None: ...

class ListCalendarsRequest(_message.Message):
    __slots__ = ["page_size", "page_token"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_token: _Optional[str] = ..., page_size: _Optional[int] = ...) -> None: ...

class ListCalendarsResponse(_message.Message):
    __slots__ = ["calendars", "next_page_token"]
    CALENDARS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    calendars: _containers.RepeatedCompositeFieldContainer[Calendar]
    next_page_token: str
    def __init__(self, calendars: _Optional[_Iterable[_Union[Calendar, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ["page_size", "page_token", "state", "to", "topic"]
    FROM_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: MessageState
    to: _timestamp_pb2.Timestamp
    topic: str
    def __init__(self, topic: _Optional[str] = ..., state: _Optional[_Union[MessageState, str]] = ..., to: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., page_token: _Optional[str] = ..., page_size: _Optional[int] = ..., **kwargs) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ["messages", "next_page_token"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ["page_size", "page_token", "topic"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    topic: str
    def __init__(self, page_token: _Optional[str] = ..., page_size: _Optional[int] = ..., topic: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ["next_page_token", "schedules"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    schedules: _containers.RepeatedCompositeFieldContainer[GetScheduleResponse]
    def __init__(self, schedules: _Optional[_Iterable[_Union[GetScheduleResponse, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ["attempt", "body", "dead_letter", "deliver_at", "due_at", "frozen", "frozen_remaining_ms", "headers", "id", "lease_expires_at", "origin_id", "receipt", "received_at", "topic"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    DUE_AT_FIELD_NUMBER: _ClassVar[int]
    FROZEN_FIELD_NUMBER: _ClassVar[int]
    FROZEN_REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_AT_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    body: bytes
    dead_letter: DeadLetter
    deliver_at: _timestamp_pb2.Timestamp
    due_at: _timestamp_pb2.Timestamp
    frozen: bool
    frozen_remaining_ms: int
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    id: str
    lease_expires_at: _timestamp_pb2.Timestamp
    origin_id: str
    receipt: str
    received_at: _timestamp_pb2.Timestamp
    topic: str
    def __init__(self, id: _Optional[str] = ..., topic: _Optional[str] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., body: _Optional[bytes] = ..., deliver_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., attempt: _Optional[int] = ..., received_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., lease_expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., origin_id: _Optional[str] = ..., receipt: _Optional[str] = ..., dead_letter: _Optional[_Union[DeadLetter, _Mapping]] = ..., due_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., frozen: bool = ..., frozen_remaining_ms: _Optional[int] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ["dead_letter", "delay_ms", "id", "reason", "receipt", "release", "topic"]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    dead_letter: bool
    delay_ms: int
    id: str
    reason: str
    receipt: str
    release: bool
    topic: str
    def __init__(self, topic: _Optional[str] = ..., id: _Optional[str] = ..., delay_ms: _Optional[int] = ..., receipt: _Optional[str] = ..., reason: _Optional[str] = ..., dead_letter: bool = ..., release: bool = ...) -> None: ...

class NackResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PauseScheduleResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class PendingBucket(_message.Message):
    __slots__ = ["approximate", "end", "pending", "start"]
    APPROXIMATE_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    approximate: bool
    end: _timestamp_pb2.Timestamp
    pending: int
    start: _timestamp_pb2.Timestamp
    def __init__(self, start: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., pending: _Optional[int] = ..., approximate: bool = ...) -> None: ...

class Policy(_message.Message):
    __slots__ = ["backoff", "expiry_drop", "expiry_unacked", "flow_burst", "flow_concurrency", "flow_fair", "flow_ordered", "flow_rate", "freeze", "lease_ms", "max_attempts", "max_dispatch_rate", "paused"]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_DROP_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_UNACKED_FIELD_NUMBER: _ClassVar[int]
    FLOW_BURST_FIELD_NUMBER: _ClassVar[int]
    FLOW_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    FLOW_FAIR_FIELD_NUMBER: _ClassVar[int]
    FLOW_ORDERED_FIELD_NUMBER: _ClassVar[int]
    FLOW_RATE_FIELD_NUMBER: _ClassVar[int]
    FREEZE_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    MAX_DISPATCH_RATE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    backoff: Backoff
    expiry_drop: bool
    expiry_unacked: bool
    flow_burst: int
    flow_concurrency: int
    flow_fair: bool
    flow_ordered: bool
    flow_rate: float
    freeze: bool
    lease_ms: int
    max_attempts: int
    max_dispatch_rate: float
    paused: bool
    def __init__(self, max_attempts: _Optional[int] = ..., backoff: _Optional[_Union[Backoff, _Mapping]] = ..., paused: bool = ..., max_dispatch_rate: _Optional[float] = ..., lease_ms: _Optional[int] = ..., flow_concurrency: _Optional[int] = ..., flow_rate: _Optional[float] = ..., flow_burst: _Optional[int] = ..., flow_ordered: bool = ..., flow_fair: bool = ..., freeze: bool = ..., expiry_drop: bool = ..., expiry_unacked: bool = ...) -> None: ...

class PurgeRequest(_message.Message):
    __slots__ = ["state", "topic"]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    state: MessageState
    topic: str
    def __init__(self, topic: _Optional[str] = ..., state: _Optional[_Union[MessageState, str]] = ...) -> None: ...

class PurgeResponse(_message.Message):
    __slots__ = ["purged"]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    purged: int
    def __init__(self, purged: _Optional[int] = ...) -> None: ...

class ReceiveRequest(_message.Message):
    __slots__ = ["lease_ms", "max_messages", "topic", "wait_ms"]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    lease_ms: int
    max_messages: int
    topic: str
    wait_ms: int
    def __init__(self, topic: _Optional[str] = ..., max_messages: _Optional[int] = ..., wait_ms: _Optional[int] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class ReceiveResponse(_message.Message):
    __slots__ = ["messages"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class ReceiveStreamRequest(_message.Message):
    __slots__ = ["lease_ms", "max_messages", "topic"]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    lease_ms: int
    max_messages: int
    topic: str
    def __init__(self, topic: _Optional[str] = ..., max_messages: _Optional[int] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class ReceiveStreamResponse(_message.Message):
    __slots__ = ["messages"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class RecurringSchedule(_message.Message):
    __slots__ = ["body", "calendar", "calendar_policy", "end", "headers", "jitter_ms", "misfire_policy", "name", "overlap_policy", "paused", "spec", "start", "time_zone", "topic"]
    BODY_FIELD_NUMBER: _ClassVar[int]
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    CALENDAR_POLICY_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    JITTER_MS_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_POLICY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    calendar: str
    calendar_policy: CalendarPolicy
    end: _timestamp_pb2.Timestamp
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    jitter_ms: int
    misfire_policy: MisfirePolicy
    name: str
    overlap_policy: OverlapPolicy
    paused: bool
    spec: str
    start: _timestamp_pb2.Timestamp
    time_zone: str
    topic: str
    def __init__(self, name: _Optional[str] = ..., topic: _Optional[str] = ..., spec: _Optional[str] = ..., body: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., start: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., time_zone: _Optional[str] = ..., misfire_policy: _Optional[_Union[MisfirePolicy, str]] = ..., paused: bool = ..., jitter_ms: _Optional[int] = ..., overlap_policy: _Optional[_Union[OverlapPolicy, str]] = ..., calendar: _Optional[str] = ..., calendar_policy: _Optional[_Union[CalendarPolicy, str]] = ...) -> None: ...

class RedriveRequest(_message.Message):
    __slots__ = ["dead_letter_topic", "ids", "max_messages", "rate_per_second", "reason", "to_topic"]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TO_TOPIC_FIELD_NUMBER: _ClassVar[int]
    dead_letter_topic: str
    ids: _containers.RepeatedScalarFieldContainer[str]
    max_messages: int
    rate_per_second: int
    reason: str
    to_topic: str
    def __init__(self, dead_letter_topic: _Optional[str] = ..., to_topic: _Optional[str] = ..., reason: _Optional[str] = ..., ids: _Optional[_Iterable[str]] = ..., rate_per_second: _Optional[int] = ..., max_messages: _Optional[int] = ...) -> None: ...

class RedriveResponse(_message.Message):
    __slots__ = ["more", "redriven", "skipped"]
    MORE_FIELD_NUMBER: _ClassVar[int]
    REDRIVEN_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    more: bool
    redriven: int
    skipped: int
    def __init__(self, redriven: _Optional[int] = ..., skipped: _Optional[int] = ..., more: bool = ...) -> None: ...

class RescheduleRequest(_message.Message):
    __slots__ = ["delay_ms", "deliver_at", "id", "key", "now", "topic"]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    delay_ms: int
    deliver_at: _timestamp_pb2.Timestamp
    id: str
    key: str
    now: bool
    topic: str
    def __init__(self, id: _Optional[str] = ..., topic: _Optional[str] = ..., key: _Optional[str] = ..., delay_ms: _Optional[int] = ..., deliver_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., now: bool = ...) -> None: ...

class RescheduleResponse(_message.Message):
    __slots__ = ["deliver_at", "id", "result"]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    deliver_at: _timestamp_pb2.Timestamp
    id: str
    result: RescheduleResult
    def __init__(self, result: _Optional[_Union[RescheduleResult, str]] = ..., id: _Optional[str] = ..., deliver_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeScheduleResponse(_message.Message):
    __slots__ = ["next"]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    next: _timestamp_pb2.Timestamp
    def __init__(self, next: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ScheduleBatchRequest(_message.Message):
    __slots__ = ["messages"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ScheduleRequest]
    def __init__(self, messages: _Optional[_Iterable[_Union[ScheduleRequest, _Mapping]]] = ...) -> None: ...

class ScheduleBatchResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ScheduleResponse]
    def __init__(self, results: _Optional[_Iterable[_Union[ScheduleResponse, _Mapping]]] = ...) -> None: ...

class ScheduleRequest(_message.Message):
    __slots__ = ["body", "delay_level", "delay_ms", "deliver_at", "expire_at", "flow_key", "headers", "idempotency_key", "topic", "ttl_ms", "working"]
    BODY_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_AT_FIELD_NUMBER: _ClassVar[int]
    FLOW_KEY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    WORKING_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    delay_level: int
    delay_ms: int
    deliver_at: _timestamp_pb2.Timestamp
    expire_at: _timestamp_pb2.Timestamp
    flow_key: str
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    idempotency_key: str
    topic: str
    ttl_ms: int
    working: WorkingTime
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., delay_ms: _Optional[int] = ..., deliver_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., delay_level: _Optional[int] = ..., working: _Optional[_Union[WorkingTime, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., expire_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ttl_ms: _Optional[int] = ..., flow_key: _Optional[str] = ...) -> None: ...

class ScheduleResponse(_message.Message):
    __slots__ = ["deliver_at", "id"]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    deliver_at: _timestamp_pb2.Timestamp
    id: str
    def __init__(self, id: _Optional[str] = ..., deliver_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ScheduleStreamRequest(_message.Message):
    __slots__ = ["batch", "message"]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    batch: ScheduleBatchRequest
    message: ScheduleRequest
    def __init__(self, message: _Optional[_Union[ScheduleRequest, _Mapping]] = ..., batch: _Optional[_Union[ScheduleBatchRequest, _Mapping]] = ...) -> None: ...

class ScheduleStreamResponse(_message.Message):
    __slots__ = ["batch", "error", "result"]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    batch: ScheduleBatchResponse
    error: Status
    result: ScheduleResponse
    def __init__(self, result: _Optional[_Union[ScheduleResponse, _Mapping]] = ..., batch: _Optional[_Union[ScheduleBatchResponse, _Mapping]] = ..., error: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class SeqRange(_message.Message):
    __slots__ = ["count", "first"]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    count: int
    first: int
    def __init__(self, first: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class ServerHealth(_message.Message):
    __slots__ = ["data_allocated_bytes", "data_bytes", "disk_free_bytes", "disk_total_bytes", "fsync_count", "fsync_p50_ms", "fsync_p99_ms", "not_ready", "ready"]
    DATA_ALLOCATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATA_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    FSYNC_COUNT_FIELD_NUMBER: _ClassVar[int]
    FSYNC_P50_MS_FIELD_NUMBER: _ClassVar[int]
    FSYNC_P99_MS_FIELD_NUMBER: _ClassVar[int]
    NOT_READY_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    data_allocated_bytes: int
    data_bytes: int
    disk_free_bytes: int
    disk_total_bytes: int
    fsync_count: int
    fsync_p50_ms: float
    fsync_p99_ms: float
    not_ready: str
    ready: bool
    def __init__(self, ready: bool = ..., not_ready: _Optional[str] = ..., fsync_count: _Optional[int] = ..., fsync_p50_ms: _Optional[float] = ..., fsync_p99_ms: _Optional[float] = ..., data_bytes: _Optional[int] = ..., disk_free_bytes: _Optional[int] = ..., disk_total_bytes: _Optional[int] = ..., data_allocated_bytes: _Optional[int] = ...) -> None: ...

class SetPolicyRequest(_message.Message):
    __slots__ = ["defaults", "policy", "topic"]
    DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    defaults: _containers.RepeatedScalarFieldContainer[str]
    policy: Policy
    topic: str
    def __init__(self, topic: _Optional[str] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ..., defaults: _Optional[_Iterable[str]] = ...) -> None: ...

class SetPolicyResponse(_message.Message):
    __slots__ = ["effective", "freezes", "policy"]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    FREEZES_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    effective: Policy
    freezes: _containers.RepeatedCompositeFieldContainer[FrozenPause]
    policy: Policy
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ..., effective: _Optional[_Union[Policy, _Mapping]] = ..., freezes: _Optional[_Iterable[_Union[FrozenPause, _Mapping]]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ["engine", "health", "lateness", "pending", "server_time", "topics"]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    LATENESS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    engine: EngineStats
    health: ServerHealth
    lateness: Lateness
    pending: _containers.RepeatedCompositeFieldContainer[PendingBucket]
    server_time: _timestamp_pb2.Timestamp
    topics: _containers.RepeatedCompositeFieldContainer[TopicStats]
    def __init__(self, server_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., engine: _Optional[_Union[EngineStats, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicStats, _Mapping]]] = ..., pending: _Optional[_Iterable[_Union[PendingBucket, _Mapping]]] = ..., lateness: _Optional[_Union[Lateness, _Mapping]] = ..., health: _Optional[_Union[ServerHealth, _Mapping]] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ["code", "message"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ThawMessageRequest(_message.Message):
    __slots__ = ["id", "key", "topic"]
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    id: str
    key: str
    topic: str
    def __init__(self, id: _Optional[str] = ..., topic: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class ThawMessageResponse(_message.Message):
    __slots__ = ["deliver_at", "id", "result"]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    deliver_at: _timestamp_pb2.Timestamp
    id: str
    result: FreezeResult
    def __init__(self, result: _Optional[_Union[FreezeResult, str]] = ..., id: _Optional[str] = ..., deliver_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TimeRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class TimeResponse(_message.Message):
    __slots__ = ["now"]
    NOW_FIELD_NUMBER: _ClassVar[int]
    now: _timestamp_pb2.Timestamp
    def __init__(self, now: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TopicInfo(_message.Message):
    __slots__ = ["dead_lettered", "due", "flow_backlogs", "flow_held", "flow_keys_held", "leased", "oldest_due_age_seconds", "policy", "topic"]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    DUE_FIELD_NUMBER: _ClassVar[int]
    FLOW_BACKLOGS_FIELD_NUMBER: _ClassVar[int]
    FLOW_HELD_FIELD_NUMBER: _ClassVar[int]
    FLOW_KEYS_HELD_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_DUE_AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    dead_lettered: int
    due: int
    flow_backlogs: _containers.RepeatedCompositeFieldContainer[FlowBacklog]
    flow_held: int
    flow_keys_held: int
    leased: int
    oldest_due_age_seconds: float
    policy: Policy
    topic: str
    def __init__(self, topic: _Optional[str] = ..., due: _Optional[int] = ..., leased: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ..., oldest_due_age_seconds: _Optional[float] = ..., flow_held: _Optional[int] = ..., flow_keys_held: _Optional[int] = ..., flow_backlogs: _Optional[_Iterable[_Union[FlowBacklog, _Mapping]]] = ...) -> None: ...

class TopicStats(_message.Message):
    __slots__ = ["acked", "dead_lettered", "delivered", "expired", "flow_held", "flow_keys_held", "leased", "nacked", "ready", "redelivered", "scheduled", "topic"]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    FLOW_HELD_FIELD_NUMBER: _ClassVar[int]
    FLOW_KEYS_HELD_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    NACKED_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    REDELIVERED_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    acked: int
    dead_lettered: int
    delivered: int
    expired: int
    flow_held: int
    flow_keys_held: int
    leased: int
    nacked: int
    ready: int
    redelivered: int
    scheduled: int
    topic: str
    def __init__(self, topic: _Optional[str] = ..., delivered: _Optional[int] = ..., acked: _Optional[int] = ..., nacked: _Optional[int] = ..., redelivered: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., ready: _Optional[int] = ..., leased: _Optional[int] = ..., scheduled: _Optional[int] = ..., expired: _Optional[int] = ..., flow_held: _Optional[int] = ..., flow_keys_held: _Optional[int] = ...) -> None: ...

class TopicsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class TopicsResponse(_message.Message):
    __slots__ = ["topics"]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ...) -> None: ...

class UpdateCalendarRequest(_message.Message):
    __slots__ = ["calendar"]
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    calendar: Calendar
    def __init__(self, calendar: _Optional[_Union[Calendar, _Mapping]] = ...) -> None: ...

class UpdateCalendarResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class UpdateScheduleRequest(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: RecurringSchedule
    def __init__(self, schedule: _Optional[_Union[RecurringSchedule, _Mapping]] = ...) -> None: ...

class UpdateScheduleResponse(_message.Message):
    __slots__ = ["next"]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    next: _timestamp_pb2.Timestamp
    def __init__(self, next: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ["method", "name", "role", "topics", "verbs"]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VERBS_FIELD_NUMBER: _ClassVar[int]
    method: str
    name: str
    role: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    verbs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ..., verbs: _Optional[_Iterable[str]] = ..., topics: _Optional[_Iterable[str]] = ..., method: _Optional[str] = ...) -> None: ...

class WorkingHours(_message.Message):
    __slots__ = ["day", "end", "start"]
    DAY_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    day: Weekday
    end: str
    start: str
    def __init__(self, day: _Optional[_Union[Weekday, str]] = ..., start: _Optional[str] = ..., end: _Optional[str] = ...) -> None: ...

class WorkingTime(_message.Message):
    __slots__ = ["after", "at_time", "calendar", "days", "duration_ms"]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    AT_TIME_FIELD_NUMBER: _ClassVar[int]
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    DAYS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    after: _timestamp_pb2.Timestamp
    at_time: str
    calendar: str
    days: int
    duration_ms: int
    def __init__(self, calendar: _Optional[str] = ..., days: _Optional[int] = ..., duration_ms: _Optional[int] = ..., at_time: _Optional[str] = ..., after: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CancelResult(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class MessageState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class RescheduleResult(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class EditResult(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FreezeResult(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class MisfirePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class OverlapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class CalendarPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Weekday(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
