// @hourglassmq/client: the TypeScript client of Hourglass. The transport-neutral core; clients
// for Node are in "@hourglassmq/client/node", for browsers in "@hourglassmq/client/web".

export {
  HourglassClient,
  type CancelResult,
  type ClientOptions,
  type Delivery,
  type Found,
  type Ref,
  type RescheduleResult,
  type Scheduled,
  type ScheduleInput,
  type State,
  type StoredMessage,
  type When,
} from "./client.js";
export type { EditInput, EditResult } from "./edit.js";
export type { FreezeMessageResult, ThawMessageResult } from "./freeze.js";
export type {
  Backoff,
  DeletedTopic,
  FrozenPause,
  Policies,
  Policy,
  PolicyField,
  PurgeState,
  RedriveOptions,
  RedriveResult,
  TopicInfo,
} from "./operate.js";
export type {
  ListSchedulesOptions,
  MisfirePolicy,
  RecurringSchedule,
  RecurringScheduleInput,
  ScheduleInfo,
  SchedulePage,
} from "./schedules.js";
export type {
  Backfilled,
  Calendar,
  CalendarPage,
  CalendarPolicy,
  OverlapPolicy,
  Weekday,
  WorkingHours,
  WorkingTime,
} from "./calendars.js";
export { deadLetter, retry, type ConsumeOptions, type DeadLetterResult, type Handler, type HandlerResult, type Retry } from "./consume.js";
export { Code, ConnectError } from "@connectrpc/connect";
export * as pb from "./gen/hourglass/v1/hourglass_pb.js";
