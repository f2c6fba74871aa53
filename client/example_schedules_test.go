package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/hourglassmq/hourglass/client"
)

// A recurring schedule delivers an ordinary message to its topic at every
// occurrence; the message says which schedule and occurrence it is.
func ExampleClient_CreateSchedule() {
	addr, stop := exampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	ctx := context.Background()
	next, err := c.CreateSchedule(ctx, client.RecurringSchedule{
		Name:  "heartbeat",
		Topic: "health",
		Spec:  "@every 1s", // or "0 9 * * MON-FRI" with TimeZone: "Europe/Berlin", or "@daily"
		Body:  []byte("ping"),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first within a second:", time.Until(next) <= time.Second)
	ds, _ := c.Receive(ctx, "health", client.ReceiveOptions{Wait: 10 * time.Second})
	d := ds[0]
	fmt.Printf("%s from %s, due at its occurrence: %v\n", d.Body, d.Headers["hourglass-schedule"],
		d.Headers["hourglass-occurrence"] == d.DeliverAt.UTC().Format(time.RFC3339Nano))
	c.Ack(ctx, d)

	_, err = c.CreateSchedule(ctx, client.RecurringSchedule{Name: "heartbeat", Topic: "health", Spec: "@hourly"})
	fmt.Println("taken:", errors.Is(err, client.ErrScheduleExists))
	fmt.Println(c.DeleteSchedule(ctx, "heartbeat")) // no occurrence is delivered after it returns
	// Output:
	// first within a second: true
	// ping from heartbeat, due at its occurrence: true
	// taken: true
	// <nil>
}

// A schedule reads its spec on its zone's wall clock: a daily 02:30 in
// Berlin fires at 03:00 on the night the clocks skip from 02:00 to 03:00.
func ExampleClient_GetSchedule() {
	addr, stop := exampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	ctx := context.Background()
	berlin, _ := time.LoadLocation("Europe/Berlin")
	// The Saturday before the last Sunday of March, two years ahead.
	sat := time.Date(time.Now().Year()+2, time.March, 31, 0, 0, 0, 0, berlin)
	for sat.Weekday() != time.Saturday {
		sat = sat.AddDate(0, 0, -1)
	}
	_, err := c.CreateSchedule(ctx, client.RecurringSchedule{
		Name: "nightly-backup", Topic: "backups", Spec: "30 2 * * *", TimeZone: "Europe/Berlin",
		Start: sat, Misfire: client.MisfireSkip,
	})
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.GetSchedule(ctx, "nightly-backup", 3)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range s.Next {
		fmt.Println(t.In(berlin).Format("Mon 15:04 MST"))
	}
	fmt.Println("armed:", s.Armed.Time().Equal(s.Next[0]), "fired:", s.Fired, "misfire:", s.Schedule.Misfire)
	c.PauseSchedule(ctx, "nightly-backup")
	s, _ = c.GetSchedule(ctx, "nightly-backup", 0)
	fmt.Println("paused:", s.Schedule.Paused, "next:", len(s.Next))
	// Output:
	// Sat 02:30 CET
	// Sun 03:00 CEST
	// Mon 02:30 CEST
	// armed: true fired: 0 misfire: skip
	// paused: true next: 0
}
