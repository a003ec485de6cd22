import type nodemailer from 'nodemailer';
import type Mail from 'nodemailer/lib/mailer/index.js';
import { UndeliverableError, type OutgoingMessage, type Transport } from '../src/platform/notify.ts';

const SUBJECTS: Record<OutgoingMessage['purpose'], string> = {
  login_code: 'Your Minaret sign-in code',
  confirm_address: 'Confirm your address for Minaret',
  signup_attempt: 'Someone tried to sign up to Minaret with your address',
  address_changed: 'The address of your Minaret account was changed',
  password_reset: 'Reset your Minaret password',
  superadmin_otp: 'Minaret superadmin sign-in code',
  superadmin_reset: 'Minaret superadmin password reset code',
  invite: 'You are invited to a mosque on Minaret',
  azaan_not_ready: 'Minaret: the azaan is not ready',
  azaan_missed: 'Minaret: an azaan was missed',
};

/** Mail through nodemailer (SMTP_URL, SMTP_FROM). SMTP carries email only: SMS and WhatsApp need the webhook. */
export function smtpTransport(url: string, from: string): Transport {
  // Loaded at the first mail: most services never send one, and nodemailer is ~3 MiB of RSS.
  type Mailer = ReturnType<typeof nodemailer.createTransport>;
  let mailer: Mailer | null = null;
  let loading: Promise<Mailer> | null = null;
  const mailerOf = () => (loading ??= import('nodemailer').then((m) => (mailer = m.default.createTransport(url))));
  return {
    name: 'smtp',
    async deliver(message, signal) {
      if (message.channel !== 'email') throw new UndeliverableError(`smtp carries email only, not ${message.channel}`);
      // nodemailer 10 cancels an SMTP send on `signal` (connect and greeting included); @types/nodemailer
      // does not declare the field yet, hence the widened type.
      const mail: Mail.Options & { signal?: AbortSignal } = { from, to: message.to, subject: SUBJECTS[message.purpose], text: message.text, signal };
      await (await mailerOf()).sendMail(mail);
    },
    async close() {
      mailer?.close();
    },
  };
}
